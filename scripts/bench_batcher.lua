-- bench_batcher.lua — the batcher's throughput and added latency: 64 in-process callers (coroutines) sending 1 row each vs the same rows scored as one batch, over max-delay settings.
--
-- usage: build/wisp run scripts/bench_batcher.lua [--quick] [--device cpu|gpu:0|auto] [--label NAME] [--out FILE.json]
--
-- Workload: a Criteo-like model (lua/wisp/synth.lua, 13 numeric + 26 categorical
-- columns of 2^18 buckets: 6.8M fp32 weights), rows of 13 valued + 26 binary features,
-- held by the callers as Lua tables (what a request handler has).
-- Baselines (median of many repeats):
--   one_batch:  the 64 rows added to one batch (batch:add_mixed) and scored (session:score):
--               the throughput target is >= 80% of 64 rows / this time;
--   single_row: one row added to a batch and scored alone: what a caller pays without a batcher.
-- Closed loop (the headline): 64 coroutines, each sending its row, waiting for its answer
-- and sending again (--rounds times), max_rows = 64, for max_delay_us in {0, 50, 100, 250,
-- 500, 1000, 2000}. Throughput = rows answered / wall time; latency = answer - submit per
-- row; added latency = latency - single_row (target: median <= max_delay_us).
-- Curves: the same 64 closed-loop callers with max_rows = 256 (batches never fill, so
-- every batch waits the full delay: the delay's cost), and open-loop arrivals (a new
-- caller every 1/rate s, rates 20k and 100k rows/s) with max_rows = 64: latency and
-- batch size against max_delay_us.
-- Output: scripts/results/bench_batcher_<label>.json (-quick with --quick); the table on stdout.
local ffi = require "ffi"
local wisp = require "wisp"
local synth = require "wisp.synth"
local batcher = require "wisp.batcher"
local placement = require "wisp.placement"
local C = require "wisp.cdef"

local fmt, floor, max, min = string.format, math.floor, math.max, math.min
local function now_us() return tonumber(C.wisp_clock_ns()) / 1e3 end
local T0 = now_us()
local function note(...) io.stderr:write(fmt("[%6.1fs] ", (now_us() - T0) / 1e6), fmt(...), "\n") end
local function sh(cmd) local p = io.popen(cmd); if not p then return "" end local s = p:read("*a") or ""; p:close(); return s end
local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

local opt = { quick = false, device = "cpu", label = nil, out = nil }
do
    local i = 1
    while i <= #arg do
        local a = arg[i]
        local function val() i = i + 1; if arg[i] == nil then error("option " .. a .. " needs a value", 0) end return arg[i] end
        if a == "--quick" then opt.quick = true
        elseif a == "--device" then opt.device = val()
        elseif a == "--label" then opt.label = val()
        elseif a == "--out" then opt.out = val()
        elseif a == "-h" or a == "--help" then
            for line in io.lines(arg[0]) do if not line:match("^%-%-") then break end print((line:gsub("^%-%- ?", ""))) end
            os.exit(0)
        else error("unknown argument " .. a, 0) end
        i = i + 1
    end
end
local CALLERS = 64
local ROUNDS = opt.quick and 50 or 200
local DELAYS = opt.quick and { 0, 100, 500, 1000 } or { 0, 50, 100, 250, 500, 1000, 2000 }

local eng = assert(wisp.engine())
eng:gpu_count()
local gen = synth.criteo { buckets = 2 ^ 18, seed = 5 }
local NF = gen.num_features
local tmp = os.tmpname()
do
    local w = ffi.new("float[?]", NF)
    local r = placement.rng(3)
    for i = 0, NF - 1 do w[i] = (r() / 4294967296 - 0.5) * 0.6 end
    assert(wisp.write_model(tmp, w, NF, { bias = -1 }))
end
local model = assert(eng:load(tmp))
os.remove(tmp)
local sess = assert(model:session(opt.device))
local out_keep = ffi.new("float[?]", 4096)
local out = ffi.cast("float *", out_keep)

-- the callers' rows: {vids, vals, bids}
local rows = {}
for i = 1, 4096 do
    local ids, vals = {}, {}
    gen:row(ids, vals)
    local vids, bids, v = {}, {}, {}
    for j = 1, 13 do vids[j] = ids[j]; v[j] = vals[j] end
    for j = 14, 39 do bids[j - 13] = ids[j] end
    rows[i] = { vids, v, bids }
end

local function median(t) return placement.median(t) end
local function pct(t, q)
    local s = {}
    for i = 1, #t do s[i] = t[i] end
    table.sort(s)
    return s[max(1, min(#s, floor(q * #s + 0.5)))]
end

-- baselines
local b1 = assert(eng:batch())
local function one_batch(first, n)
    b1:clear()
    for i = first, first + n - 1 do local r = rows[i]; b1:add_mixed(r[1], r[2], r[3]) end
    assert(sess:score(b1, out))
end
local function time_med(fn, reps)
    local t = {}
    for k = 1, reps do local s = now_us(); fn(k); t[k] = now_us() - s end
    return median(t)
end
for k = 1, 200 do one_batch(1 + (k % 60) * 64, 64) end
local t_batch = time_med(function(k) one_batch(1 + (k % 60) * 64, 64) end, 2000)
local t_single = time_med(function(k) one_batch(1 + k % 4000, 1) end, 5000)
local t_score_only = time_med(function() assert(sess:score(b1, out)) end, 5000)
note("one batch of 64 (build + score): %.1f us (%.0f rows/s); one row alone: %.1f us; score of a 1-row batch only: %.1f us",
     t_batch, 64 / t_batch * 1e6, t_single, t_score_only)

-- closed loop: CALLERS coroutines x ROUNDS requests
local function closed_loop(max_rows, delay, rounds)
    local sched = batcher.scheduler()
    local b = assert(batcher.new { session = sess, runtime = sched.runtime, max_rows = max_rows,
                                   max_delay_us = delay, max_queue = 4096 })
    local lat = {}
    for c = 1, CALLERS do
        sched:spawn(function()
            for k = 1, rounds do
                local r = rows[1 + ((c - 1) * 61 + k) % 4096]
                local p, err = b:score(r[1], r[2], r[3])
                if not p then error(err) end
                local ts, _, td = b:last_timing()
                lat[#lat + 1] = td - ts
            end
        end)
    end
    local s = now_us()
    sched:run()
    local wall = now_us() - s
    local st = b:stats()
    b:close()
    local n = CALLERS * rounds
    local added = {}
    for i = 1, #lat do added[i] = lat[i] - t_single end
    return { max_rows = max_rows, max_delay_us = delay, callers = CALLERS, rows = n, wall_us = wall,
             rows_per_s = n / wall * 1e6, throughput_vs_one_batch = (n / wall) / (64 / t_batch),
             latency_p50_us = median(lat), latency_p99_us = pct(lat, 0.99),
             added_latency_p50_us = median(added), added_latency_p99_us = pct(added, 0.99),
             mean_batch = st.mean_batch, batches = st.batches, by_full = st.by_full, by_delay = st.by_delay }
end

-- open loop: a caller every 1e6/rate µs
local function open_loop(rate, max_rows, delay, total)
    local sched = batcher.scheduler()
    local b = assert(batcher.new { session = sess, runtime = sched.runtime, max_rows = max_rows,
                                   max_delay_us = delay, max_queue = 4096 })
    local lat, rejected = {}, 0
    local gap = 1e6 / rate
    sched:spawn(function()
        local start = now_us()
        for k = 1, total do
            local due = start + k * gap
            local now = now_us()
            if due > now then sched.runtime.sleep_us(due - now) end
            sched:spawn(function()
                local r = rows[1 + k % 4096]
                local p = b:score(r[1], r[2], r[3])
                if not p then rejected = rejected + 1; return end
                local ts, _, td = b:last_timing()
                lat[#lat + 1] = td - ts
            end)
        end
    end)
    local s = now_us()
    sched:run()
    local wall = now_us() - s
    local st = b:stats()
    b:close()
    return { rate = rate, max_rows = max_rows, max_delay_us = delay, rows = total, achieved_rows_per_s = #lat / wall * 1e6,
             latency_p50_us = median(lat), latency_p99_us = pct(lat, 0.99), mean_batch = st.mean_batch,
             batches = st.batches, rejected = rejected }
end

local headline, curve_256, curve_open = {}, {}, {}
for _, d in ipairs(DELAYS) do
    local r = closed_loop(64, d, ROUNDS)
    headline[#headline + 1] = r
    note("closed loop, max_rows 64, max_delay %5d us: %8.0f rows/s (%.0f%% of one batch), added latency p50 %.1f us, mean batch %.1f",
         d, r.rows_per_s, 100 * r.throughput_vs_one_batch, r.added_latency_p50_us, r.mean_batch)
end
for _, d in ipairs(DELAYS) do
    local r = closed_loop(256, d, opt.quick and 10 or 40)
    curve_256[#curve_256 + 1] = r
    note("closed loop, max_rows 256, max_delay %5d us: %8.0f rows/s, latency p50 %.1f us", d, r.rows_per_s, r.latency_p50_us)
end
for _, rate in ipairs({ 20000, 100000 }) do
    for _, d in ipairs(DELAYS) do
        local r = open_loop(rate, 64, d, opt.quick and 2000 or 10000)
        curve_open[#curve_open + 1] = r
        note("open loop %6d rows/s, max_delay %5d us: achieved %8.0f rows/s, latency p50 %.1f p99 %.1f us, mean batch %.1f",
             rate, d, r.achieved_rows_per_s, r.latency_p50_us, r.latency_p99_us, r.mean_batch)
    end
end

-- the targets, at every delay of the headline
local all_tp, all_lat = true, true
for _, r in ipairs(headline) do
    r.throughput_met = r.throughput_vs_one_batch >= 0.8
    r.latency_met = r.added_latency_p50_us <= r.max_delay_us
    all_tp = all_tp and r.throughput_met
    all_lat = all_lat and r.latency_met
end

local cpuinfo = io.open("/proc/cpuinfo") and io.open("/proc/cpuinfo"):read("*a") or ""
local commit = trim(sh("git rev-parse --short HEAD 2>/dev/null"))
if commit == "" then commit = os.getenv("WISP_COMMIT") or "unknown" end
if trim(sh("git status --porcelain -- . ':!scripts/results' 2>/dev/null")) ~= "" then commit = commit .. "+uncommitted" end
local label = (opt.label or trim(sh("hostname"))):gsub("[^%w%._-]", "_")
local script_dir = (arg[0] or "scripts/bench_batcher.lua"):match("^(.*)/[^/]*$") or "."
local out_path = opt.out or (script_dir .. "/results/bench_batcher_" .. label .. (opt.quick and "-quick" or "") .. ".json")
local _, gpu_status = eng:devices()
local doc = {
    benchmark = "bench_batcher", label = label, mode = opt.quick and "quick" or "full",
    machine = { cpu = cpuinfo:match("model name%s*:%s*([^\n]+)") or "unknown", engine_threads = eng:threads(),
                gpu_status = gpu_status },
    commit = commit, date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    command = "wisp run " .. (arg[0] or "scripts/bench_batcher.lua") .. " " .. table.concat(arg, " "),
    device = opt.device, scored_on = sess:last_device(),
    peers = { one_batch_us = t_batch, one_batch_rows_per_s = 64 / t_batch * 1e6, single_row_us = t_single,
              score_only_1_row_us = t_score_only,
              note = "peers measured in the same run: the same 64 rows built into one batch and scored; one row alone" },
    targets = { throughput_vs_one_batch = ">= 0.8 (64 callers, 1 row each)", added_latency_p50 = "<= max_delay_us" },
    throughput_met_at_every_delay = all_tp, latency_met_at_every_delay = all_lat,
    closed_loop_max_rows_64 = headline, closed_loop_max_rows_256 = curve_256, open_loop_max_rows_64 = curve_open,
    seconds = (now_us() - T0) / 1e6,
}
local dir = out_path:match("^(.*)/[^/]*$")
if dir then os.execute("mkdir -p '" .. dir .. "'") end
local f = assert(io.open(out_path, "w"))
f:write(require("cjson").encode(doc), "\n")
f:close()

print(fmt("bench_batcher on %s, device %s (%s); one batch of 64: %.1f us; one row alone: %.1f us",
          doc.machine.cpu, opt.device, sess:last_device(), t_batch, t_single))
print(fmt("%-10s %-12s %12s %10s %14s %14s %10s", "max_rows", "max_delay_us", "rows/s", "vs batch", "added p50 us", "latency p99", "mean batch"))
for _, group in ipairs({ headline, curve_256 }) do
    for _, r in ipairs(group) do
        print(fmt("%-10d %-12d %12.0f %9.0f%% %14.1f %14.1f %10.1f", r.max_rows, r.max_delay_us, r.rows_per_s,
                  100 * r.throughput_vs_one_batch, r.added_latency_p50_us, r.latency_p99_us, r.mean_batch))
    end
end
print(fmt("%-10s %-12s %12s %14s %14s %10s", "open rate", "max_delay_us", "achieved", "latency p50", "latency p99", "mean batch"))
for _, r in ipairs(curve_open) do
    print(fmt("%-10d %-12d %12.0f %14.1f %14.1f %10.1f", r.rate, r.max_delay_us, r.achieved_rows_per_s,
              r.latency_p50_us, r.latency_p99_us, r.mean_batch))
end
print(fmt("64 callers x 1 row, max_rows 64: throughput >= 80%% of one batch at every delay: %s; median added latency <= max delay at every delay: %s",
          all_tp and "met" or "MISSED", all_lat and "met" or "MISSED"))
print("written: " .. out_path)
