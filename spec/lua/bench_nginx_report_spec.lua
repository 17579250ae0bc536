-- bench_nginx_report_spec.lua — scripts/bench/bench_nginx_report.lua on hand-made runs: the headline (per round, nginx over the mean of the peer's brackets; median of rounds), an unsteady peer, the p99/p50 points of every mode, saturated open-loop runs, the million-request count.
local cjson = require "cjson"
local H = require "helpers"

local build = os.getenv("WISP_BUILD") or "build"
local WISP = build .. "/wisp"

local function near(got, want, what)
    assert(type(got) == "number", what .. ": no number (" .. tostring(got) .. ")")
    assert(math.abs(got - want) <= 1e-9 * math.max(1, math.abs(want)), string.format("%s: got %.12g, want %.12g", what, got, want))
end

-- the report's summary, and what it wrote on stderr, for RUNS (a list of tables, one a line)
local function report(runs, pinned)
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    for _, r in ipairs(runs) do f:write(cjson.encode(r), "\n") end
    f:close()
    local err = path .. ".err"
    local p = assert(io.popen(string.format("%s run scripts/bench/bench_nginx_report.lua %s %s 2>%s", WISP, path,
                                            pinned and "pinned" or "unpinned", err)))
    local out = p:read("*a")
    p:close()
    local ef = io.open(err)
    local stderr = ef and ef:read("*a") or ""
    if ef then ef:close() end
    os.remove(path); os.remove(err)
    local ok, F = pcall(cjson.decode, out)
    assert(ok and type(F) == "table", "the report printed no JSON: " .. out:sub(1, 300) .. "\n" .. stderr)
    return F.summary, stderr, F
end

-- one wrk run of NAME in ROUND
local function wrk(name, round, rows_per_s, extra)
    local t = { name = name, round = round, rps = rows_per_s / 100, rows_per_s = rows_per_s, rows_per_request = 100,
                p50_us = 500, p99_us = 900, non2xx = 0, socket_errors = 0, rows_per_worker_cpu_s = rows_per_s / 2,
                worker_cpu_us_per_request = 90 }
    for k, v in pairs(extra or {}) do t[k] = v end
    return t
end
-- the W-process peer of ROUND at one bracket: one line per process
local function peer(round, bracket, per_proc)
    local out = {}
    for k, r in ipairs(per_proc) do
        out[#out + 1] = { name = "peer_100row_wproc", round = round, bracket = bracket, proc = k, procs = #per_proc,
                          parse_score_rows_per_s = r, parse_score_rows_per_cpu_s = r, device = "cpu" }
    end
    return out
end

describe("bench_nginx_report", function()
    after_each(H.cleanup)

    it("takes per round nginx's rows/s over the mean of the peer's brackets, and the median of the rounds", function()
        local runs = {}
        local function add(list) for _, r in ipairs(list) do runs[#runs + 1] = r end end
        -- round 1: peer 2.0M before, 2.2M after (mean 2.1M), nginx 1.4M -> 2/3
        add(peer(1, "before", { 1.0e6, 1.0e6 })); add { wrk("inline_100row", 1, 1.4e6) }; add(peer(1, "after", { 1.1e6, 1.1e6 }))
        -- round 2: peer 2.0M both times, nginx 1.6M -> 0.8
        add(peer(2, "before", { 1.0e6, 1.0e6 })); add { wrk("inline_100row", 2, 1.6e6) }; add(peer(2, "after", { 1.0e6, 1.0e6 }))
        -- round 3: the peer doubles between its brackets (unsteady), mean 1.5M, nginx 1.5M -> 1.0
        add(peer(3, "before", { 0.5e6, 0.5e6 })); add { wrk("inline_100row", 3, 1.5e6) }; add(peer(3, "after", { 1.0e6, 1.0e6 }))
        local S, stderr = report(runs, true)
        local h = assert(S.headline_100row, "no headline")
        assert.is_true(h.pinned)
        near(h.per_round[1], 1.4 / 2.1, "round 1")
        near(h.per_round[2], 0.8, "round 2")
        near(h.per_round[3], 1.0, "round 3")
        near(h.ratio, 0.8, "the median of the rounds")
        near(h.min, 1.4 / 2.1, "min"); near(h.max, 1.0, "max")
        assert.is_true(h.peer_unstable)
        assert.same({ 3 }, h.peer_unstable_rounds)
        local b = S.peer_100row_wproc_brackets.rounds
        near(b[1].after_over_before, 1.1, "round 1 after/before")
        assert.is_false(b[2].unstable)
        near(b[3].difference, 1.0, "round 3 difference")
        assert.matches("headline 100%-row: 0%.80", stderr)
        assert.matches("peer unstable: round 3", stderr)
        -- unpinned, the headline is per CPU-second: nginx's rows per worker CPU-second (half its
        -- rows/s here: two workers) over one peer process's (the mean of the processes of the
        -- two brackets; each process's rows/s here): the same ratios
        S = report(runs, false)
        assert.is_false(S.headline_100row.pinned)
        near(S.headline_100row.per_round[1], 0.7 / 1.05, "per CPU-second, round 1")
        near(S.headline_100row.ratio, 0.8, "per CPU-second, median")
    end)

    it("summarises the points at ~80% of every mode, and flags open-loop runs that lost their schedule", function()
        local runs = {
            { name = "inline_100row_at80", round = 1, rps = 800, p50_us = 100, p90_us = 180, p99_us = 250, p999_us = 400,
              connections = 40, think_ms = 4 },
            { name = "inline_100row_at80_target", round = 1, peak_rps = 1000, target_rps = 800, arrivals = "poisson", calibration_runs = 2 },
            { name = "inline_100row_at80_calibrate", round = 1, rps = 700, p50_us = 90, p99_us = 200 },
            { name = "auto_100row_at80_paced", round = 1, rps = 1600, p50_us = 200, p90_us = 300, p99_us = 700, p999_us = 900 },
            { name = "auto_100row_at80_paced_target", round = 1, peak_rps = 2000, target_rps = 1600, arrivals = "paced", calibration_runs = 1 },
            { name = "inline_1row_at80_open_poisson", round = 1, rps = 8000, p50_us = 30, p90_us = 50, p99_us = 150, p999_us = 300,
              sent = 1000, waited_for_connection = 50 },
            { name = "inline_1row_at80_open_poisson_target", round = 1, peak_rps = 10000, target_rps = 8000, arrivals = "open_poisson", calibration_runs = 0 },
            { name = "thread_1row_at80_open_poisson", round = 1, rps = 8000, p50_us = 40, p90_us = 60, p99_us = 100, p999_us = 200,
              sent = 1000, waited_for_connection = 5 },
            { name = "thread_1row_at80_open_poisson_target", round = 1, peak_rps = 10000, target_rps = 8000, arrivals = "open_poisson", calibration_runs = 0 },
            -- a point without its target record is not one (no peak to be 80% of)
            { name = "async_100row_at80", round = 1, rps = 10, p50_us = 1, p99_us = 2 },
        }
        local S, stderr = report(runs, false)
        local a = assert(S.inline_100row_at80)
        near(a.p99_over_p50, 2.5, "inline p99/p50"); near(a.fraction_of_peak, 0.8, "inline fraction")
        assert.equal("poisson", a.arrivals)
        local p = assert(S.auto_100row_at80_paced, "the auto mode's point")
        near(p.p99_over_p50, 3.5, "auto p99/p50"); near(p.fraction_of_peak, 0.8, "auto fraction")
        assert.is_true(S.inline_1row_at80_open_poisson.saturated)
        near(S.inline_1row_at80_open_poisson.waited_for_connection_fraction, 0.05, "waited")
        assert.is_false(S.thread_1row_at80_open_poisson.saturated)
        assert.is_nil(S.async_100row_at80.p99_over_p50)
        assert.is_nil(S.inline_100row_at80_calibrate.p99_over_p50)
        -- stderr: inline's points first, each once, the saturated one said so
        local i_in, i_auto = stderr:find("inline_100row_at80 "), stderr:find("auto_100row_at80_paced ")
        assert.is_truthy(i_in and i_auto and i_in < i_auto)
        assert.matches("inline_1row_at80_open_poisson[^\n]*SATURATED: 5%% of requests waited", stderr)
        assert.is_nil(stderr:match("thread_1row_at80_open_poisson[^\n]*SATURATED"))
    end)

    it("adds up the million-request runs", function()
        local S = report({
            { name = "million_1row", round = 1, rps = 50000, requests = 600000, non2xx = 0, socket_errors = 0, seconds = 12, p99_us = 800 },
            { name = "million_1row", round = 2, rps = 50000, requests = 450000, non2xx = 1, socket_errors = 0, seconds = 9, p99_us = 900 },
        }, false)
        local m = S.million_1row
        assert.equal(1050000, m.requests)
        assert.equal(1, m.non2xx)
        assert.equal(2, m.runs)
        near(m.rps, 1050000 / 21, "rps")
        assert.equal(900, m.p99_us)
    end)
end)
