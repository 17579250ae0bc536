-- bench_nginx_report.lua — summarises scripts/bench/bench_nginx.sh's runs (one JSON object a line) into its "figures": medians over rounds, ratios to the peer, p99/p50 at 80%.
--   wisp run scripts/bench/bench_nginx_report.lua RUNS.jsonl [pinned] > figures.json
local cjson = require "cjson"
local groups, order = {}, {}
for line in io.lines(arg[1]) do
    local ok, t = pcall(cjson.decode, line)
    if ok and type(t) == "table" and t.name then
        if not groups[t.name] then groups[t.name] = {}; order[#order + 1] = t.name end
        table.insert(groups[t.name], t)
    end
end
local function stat(list, key, how)
    local v = {}
    for _, t in ipairs(list) do if type(t[key]) == "number" then v[#v + 1] = t[key] end end
    if #v == 0 then return nil end
    table.sort(v)
    if how == "max" then return v[#v] end
    if how == "min" then return v[1] end
    return v[math.floor((#v + 1) / 2)]
end
local F = { runs = {}, summary = {} }
for _, name in ipairs(order) do F.runs[name] = groups[name] end
local S = F.summary
for _, name in ipairs(order) do
    local g = groups[name]
    if name:match("^peer") then
        S[name] = { parse_score_rows_per_s_median = stat(g, "parse_score_rows_per_s"),
                    parse_score_rows_per_cpu_s_median = stat(g, "parse_score_rows_per_cpu_s"),
                    parse_score_rows_per_s_max = stat(g, "parse_score_rows_per_s", "max"),
                    score_rows_per_s_median = stat(g, "score_rows_per_s"), device = g[1].device }
    elseif g[1].rps then
        S[name] = { rps_median = stat(g, "rps"), rps_max = stat(g, "rps", "max"),
                    rows_per_s_median = stat(g, "rows_per_s"), rows_per_s_max = stat(g, "rows_per_s", "max"),
                    p50_us_median = stat(g, "p50_us"), p99_us_median = stat(g, "p99_us"), rounds = #g,
                    non2xx = stat(g, "non2xx", "max"), socket_errors = stat(g, "socket_errors", "max"),
                    worker_cpu_us_per_request_median = stat(g, "worker_cpu_us_per_request"),
                    rows_per_worker_cpu_s_median = stat(g, "rows_per_worker_cpu_s"),
                    worker_preemptions_per_request_median = stat(g, "worker_preemptions_per_request"),
                    wrk_cpu_s_median = stat(g, "wrk_cpu_s"), worker_cpu_s_median = stat(g, "worker_cpu_s") }
    end
end
-- the median of a list (the mean of the two middle values for an even count), not sorting it
local function median(v)
    if not v or #v == 0 then return nil end
    local s = {}
    for i, x in ipairs(v) do s[i] = x end
    table.sort(s)
    local n = #s
    if n % 2 == 1 then return s[(n + 1) / 2] end
    return (s[n / 2] + s[n / 2 + 1]) / 2
end
local function minmax(v)
    local lo, hi
    for _, x in ipairs(v or {}) do
        if not lo or x < lo then lo = x end
        if not hi or x > hi then hi = x end
    end
    return lo, hi
end
-- The W-process peer brackets each round's inline_100row: W processes at once immediately
-- before it and immediately after it ("bracket"; runs without one, from before the brackets,
-- count as "before"). Per bracket: the W processes' summed rows/s (wall clock) and their mean
-- rows per CPU-second; a bracket where a process printed nothing is left out.
local UNSTABLE = 0.15
local brackets, bracket_rounds = {}, {}
for _, p in ipairs(groups.peer_100row_wproc or {}) do
    local b = brackets[p.round]
    if not b then b = {}; brackets[p.round] = b; bracket_rounds[#bracket_rounds + 1] = p.round end
    local side = p.bracket or "before"
    local x = b[side] or { rows_per_s = 0, cps = 0, k = 0, bad = 0, procs = p.procs, per_proc = {} }
    b[side] = x
    if type(p.parse_score_rows_per_s) == "number" then
        x.rows_per_s = x.rows_per_s + p.parse_score_rows_per_s
        x.cps = x.cps + (p.parse_score_rows_per_cpu_s or 0); x.k = x.k + 1
        x.per_proc[#x.per_proc + 1] = p.parse_score_rows_per_s
    else
        x.bad = x.bad + 1
    end
end
table.sort(bracket_rounds)
local function side_ok(x) return x and x.k > 0 and x.bad == 0 and (not x.procs or x.k >= x.procs) end
-- the peer of a round: the mean of its brackets' rows/s, and of their rows per CPU-second
local function peer_w(round)
    local b = brackets[round]
    if not b then return nil end
    local n, rps, cps = 0, 0, 0
    for _, side in ipairs { "before", "after" } do
        local x = b[side]
        if side_ok(x) then n = n + 1; rps = rps + x.rows_per_s; cps = cps + x.cps / x.k end
    end
    if n == 0 then return nil end
    return rps / n, cps / n, n
end
local bracket_list, unstable = {}, {}
for _, round in ipairs(bracket_rounds) do
    local b = brackets[round]
    local e = { round = round }
    for _, side in ipairs { "before", "after" } do
        local x = b[side]
        if x then
            e[side .. "_rows_per_s"] = side_ok(x) and x.rows_per_s or nil
            e[side .. "_rows_per_cpu_s"] = side_ok(x) and x.cps / x.k or nil
            e[side .. "_per_process_rows_per_s"] = x.per_proc
            if not side_ok(x) then e[side .. "_error"] = "a peer process printed nothing" end
        end
    end
    local a, bf = e.after_rows_per_s, e.before_rows_per_s
    e.mean_rows_per_s = peer_w(round)
    if a and bf and a > 0 and bf > 0 then
        e.after_over_before = a / bf
        e.difference = math.max(a, bf) / math.min(a, bf) - 1      -- max/min - 1
        e.unstable = e.difference > UNSTABLE
        if e.unstable then unstable[#unstable + 1] = e end
    end
    bracket_list[#bracket_list + 1] = e
end
if #bracket_list > 0 then
    S.peer_100row_wproc_brackets = { rounds = bracket_list, threshold = UNSTABLE, unstable_rounds = #unstable,
        what = "the W peer processes at once, immediately before (before_) and immediately after (after_) each round's inline_100row: "
            .. "summed rows/s (wall clock) and mean rows per CPU-second; difference = max/min - 1 of the two rows/s; unstable above the threshold" }
end
-- nginx 100-row rows/s over the peer, per round (side by side; lists in round order) and their medians
local function ratios(nginx_name)
    local ng, p1 = groups[nginx_name], groups.peer_100row_1proc
    if not ng then return nil end
    local per, cpu, two, wcpu, rr, rr1 = {}, {}, {}, {}, {}, {}
    for _, t in ipairs(ng) do
        for _, p in ipairs(p1 or {}) do
            if p.round == t.round and p.parse_score_rows_per_s then
                per[#per + 1] = t.rows_per_s / p.parse_score_rows_per_s; rr1[#rr1 + 1] = t.round
                if t.rows_per_worker_cpu_s and p.parse_score_rows_per_cpu_s then
                    cpu[#cpu + 1] = t.rows_per_worker_cpu_s / p.parse_score_rows_per_cpu_s
                end
            end
        end
        -- the W peer processes at once (as nginx's W workers; with --pin on the same cores):
        -- nginx's rows/s over their summed rows/s, the mean of the brackets before and after
        local rps, cps = peer_w(t.round)
        if rps and rps > 0 then
            two[#two + 1] = t.rows_per_s / rps; rr[#rr + 1] = t.round
            if cps and cps > 0 and t.rows_per_worker_cpu_s then wcpu[#wcpu + 1] = t.rows_per_worker_cpu_s / cps end
        end
    end
    if #per == 0 and #two == 0 then return nil end
    return { over_peer_1proc_per_round = per, over_peer_1proc_median = median(per),
             over_peer_wproc_per_round = two, over_peer_wproc_median = median(two), wproc_rounds = rr,
             per_cpu_second_per_round = cpu, per_cpu_second_median = median(cpu), peer_1proc_rounds = rr1,
             per_cpu_second_wproc_per_round = wcpu, per_cpu_second_wproc_median = median(wcpu),
             peer = "wproc: the mean of the W-process peer's brackets before and after inline_100row, same round; 1proc: the one-process peer of the round",
             target = ">= 0.70" }
end
S.ratio_inline_100row = ratios("inline_100row")
S.ratio_async_100row = ratios("async_100row")
S.ratio_thread_100row = ratios("thread_100row")
S.ratio_auto_100row = ratios("auto_100row")
-- the runs at ~80% of a peak, every mode (--at80-modes): MODE_NROW_at80[_paced|_open_const|_open_poisson],
-- each with its _target record; inline first, then by name
local at80_names = {}
for name in pairs(groups) do
    if name:match("^%a+_%d+row_at80$") or name:match("^%a+_%d+row_at80_paced$") or name:match("^%a+_%d+row_at80_open_%a+$") then
        at80_names[#at80_names + 1] = name
    end
end
table.sort(at80_names, function(a, b)
    local ia, ib = a:match("^inline_") ~= nil, b:match("^inline_") ~= nil
    if ia ~= ib then return ia end
    return a < b
end)
for _, name in ipairs(at80_names) do
    local g, tg = groups[name], groups[name .. "_target"]
    if g and tg then
        local t = g[1]
        S[name] = { rps = t.rps, peak_rps = tg[1].peak_rps, fraction_of_peak = t.rps / tg[1].peak_rps,
                    p50_us = t.p50_us, p90_us = t.p90_us, p99_us = t.p99_us, p999_us = t.p999_us,
                    p99_over_p50 = t.p99_us / math.max(t.p50_us, 1), arrivals = tg[1].arrivals or "poisson",
                    calibration_runs = tg[1].calibration_runs, worker_cpu_us_per_request = t.worker_cpu_us_per_request,
                    connections = t.connections, think_ms = t.think_ms, target = "p99/p50 <= 3" }
        if t.sent and t.waited_for_connection then
            -- open loop: a request that found every connection busy waited for one (its wait
            -- counts in its latency); past 1% of them the generator no longer kept its
            -- schedule (the server, or the generator itself on shared cores, was saturated)
            -- and the run measures a backlog, not the service at 80%
            local f = t.waited_for_connection / math.max(t.sent, 1)
            S[name].waited_for_connection_fraction = f
            S[name].saturated = f > 0.01
        end
    end
end
-- the headline: per round, nginx's 100-row rows/s over the mean of the W-process peer's
-- brackets (immediately before and after that round's inline_100row); the median of the
-- rounds, with min, max and the list. With the peers pinned to the workers' cores (--pin):
-- wall clock rows/s; unpinned (wrk shares the cores): rows per worker CPU-second over the
-- peer's rows per CPU-second. The 1-process peer's ratios are kept beside, not decisive.
local r = S.ratio_inline_100row
if r then
    local pinned = arg[2] == "pinned"
    local list = pinned and r.over_peer_wproc_per_round or r.per_cpu_second_wproc_per_round
    local lo, hi = minmax(list)
    local un = {}
    for _, e in ipairs(unstable) do un[#un + 1] = e.round end
    S.headline_100row = { pinned = pinned,
        ratio = median(list), min = lo, max = hi, per_round = list, rounds = r.wproc_rounds,
        basis = pinned and "per round: nginx rows/s over the W pinned peer processes' rows/s (the mean of the runs immediately before and after it), wall clock, on the same W cores; median of rounds"
            or "per round: nginx rows per worker CPU-second over the W peer processes' rows per CPU-second (the mean of the runs immediately before and after it; unpinned: wrk shares the cores); median of rounds",
        wall_over_wproc = r.over_peer_wproc_median, wall_over_wproc_per_round = r.over_peer_wproc_per_round,
        per_cpu_second = r.per_cpu_second_wproc_median, per_cpu_second_per_round = r.per_cpu_second_wproc_per_round,
        per_cpu_second_over_1proc = r.per_cpu_second_median, wall_over_1proc = r.over_peer_1proc_median,
        peer_unstable = #un > 0, peer_unstable_rounds = #un > 0 and un or nil, peer_unstable_threshold = UNSTABLE,
        target = ">= 0.70" }
end
if groups.million_1row then
    local m = { requests = 0, non2xx = 0, socket_errors = 0, seconds = 0, runs = #groups.million_1row,
                target = "0 failed of 1,000,000" }
    for _, t in ipairs(groups.million_1row) do
        m.requests = m.requests + (t.requests or 0); m.non2xx = m.non2xx + (t.non2xx or 0)
        m.socket_errors = m.socket_errors + (t.socket_errors or 0); m.seconds = m.seconds + (t.seconds or 0)
        m.p99_us = math.max(m.p99_us or 0, t.p99_us or 0)
    end
    m.rps = m.requests / math.max(m.seconds, 1e-9)
    S.million_1row = m
end
-- a short summary on stderr
local function f(x, d) return x and string.format("%." .. (d or 2) .. "f", x) or "-" end
local function list_str(v, d)
    local t = {}
    for i, x in ipairs(v or {}) do t[i] = f(x, d) end
    return "[" .. table.concat(t, " ") .. "]"
end
if S.headline_100row then
    local h = S.headline_100row
    io.stderr:write(string.format("headline 100-row: %s %s min %s max %s (%s, median of %d rounds, peer = mean of the %s brackets before/after; "
        .. "wall/W peers %s, per CPU-second %s %s, per CPU-second over 1 peer %s; target >= 0.70)\n",
        f(h.ratio), list_str(h.per_round), f(h.min), f(h.max), h.pinned and "pinned: wall clock" or "unpinned: per CPU-second",
        #(h.per_round or {}), "W-process", f(h.wall_over_wproc), f(h.per_cpu_second), list_str(h.per_cpu_second_per_round),
        f(h.per_cpu_second_over_1proc)))
end
for _, e in ipairs(S.peer_100row_wproc_brackets and S.peer_100row_wproc_brackets.rounds or {}) do
    io.stderr:write(string.format("%s: round %d: the W-process peer before %s, after %s rows/s (after/before %s, difference %s%%%s)\n",
        e.unstable and "peer unstable" or "peer bracket", e.round, f(e.before_rows_per_s, 0), f(e.after_rows_per_s, 0),
        f(e.after_over_before, 3), e.difference and f(100 * e.difference, 1) or "-",
        e.unstable and string.format(" > %d%%: this round's ratio is uncertain by as much", UNSTABLE * 100) or ""))
end
if S.inline_100row then
    io.stderr:write(string.format("inline_100row: %s rows/s, worker CPU %s us/request (median)\n",
        f(S.inline_100row.rows_per_s_median, 0), f(S.inline_100row.worker_cpu_us_per_request_median, 1)))
end
for _, name in ipairs(at80_names) do
    local t = S[name]
    if t and t.p99_over_p50 then                   -- a point with its target record (its peak)
        io.stderr:write(string.format("%-26s %s of peak, p50 %d us, p99 %d us, p99/p50 %s (target <= 3)%s\n",
            name, f(t.fraction_of_peak), t.p50_us, t.p99_us, f(t.p99_over_p50),
            t.saturated and string.format("; SATURATED: %.0f%% of requests waited for a connection, not a point at 80%%",
                                          100 * t.waited_for_connection_fraction) or ""))
    end
end
io.write(cjson.encode(F), "\n")
