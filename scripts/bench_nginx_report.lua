-- bench_nginx_report.lua — summarises scripts/bench_nginx.sh's runs (one JSON object a line) into its "figures": medians over rounds, ratios to the peer, p99/p50 at 80%.
--   wisp run scripts/bench_nginx_report.lua RUNS.jsonl [pinned] > figures.json
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
-- nginx 100-row rows/s over the peer, per round (side by side) and of the medians
local function ratios(nginx_name)
    local ng, p1 = groups[nginx_name], groups.peer_100row_1proc
    if not ng or not p1 then return nil end
    local per = {}
    for _, t in ipairs(ng) do
        for _, p in ipairs(p1) do
            if p.round == t.round then per[#per + 1] = t.rows_per_s / p.parse_score_rows_per_s end
        end
    end
    -- the W peer processes run at once (as nginx's W workers; with --pin on the same cores):
    -- nginx's rows/s over their sum, wall clock, round by round
    local two, wcpu = {}, {}
    for _, t in ipairs(ng) do
        local sum, cps, k = 0, 0, 0
        for _, p in ipairs(groups.peer_100row_wproc or {}) do
            if p.round == t.round and p.parse_score_rows_per_s then
                sum = sum + p.parse_score_rows_per_s; cps = cps + (p.parse_score_rows_per_cpu_s or 0); k = k + 1
            end
        end
        if sum > 0 then two[#two + 1] = t.rows_per_s / sum end
        if k > 0 and cps > 0 and t.rows_per_worker_cpu_s then wcpu[#wcpu + 1] = t.rows_per_worker_cpu_s / (cps / k) end
    end
    local cpu = {}
    for _, t in ipairs(ng) do
        for _, p in ipairs(p1) do
            if p.round == t.round and t.rows_per_worker_cpu_s and p.parse_score_rows_per_cpu_s then
                cpu[#cpu + 1] = t.rows_per_worker_cpu_s / p.parse_score_rows_per_cpu_s
            end
        end
    end
    table.sort(per); table.sort(two); table.sort(cpu); table.sort(wcpu)
    local function mid(v) return v[math.floor((#v + 1) / 2)] end
    return { over_peer_1proc_per_round = per, over_peer_1proc_median = mid(per),
             over_peer_wproc_per_round = two, over_peer_wproc_median = mid(two),
             per_cpu_second_per_round = cpu, per_cpu_second_median = mid(cpu),
             per_cpu_second_wproc_per_round = wcpu, per_cpu_second_wproc_median = mid(wcpu),
             target = ">= 0.70" }
end
S.ratio_inline_100row = ratios("inline_100row")
S.ratio_async_100row = ratios("async_100row")
S.ratio_thread_100row = ratios("thread_100row")
S.ratio_auto_100row = ratios("auto_100row")
for _, name in ipairs { "inline_100row_at80", "inline_100row_at80_paced", "inline_1row_at80", "inline_1row_at80_paced",
                          "inline_100row_at80_open_const", "inline_100row_at80_open_poisson",
                          "inline_1row_at80_open_const", "inline_1row_at80_open_poisson" } do
    local g, tg = groups[name], groups[name .. "_target"]
    if g and tg then
        local t = g[1]
        S[name] = { rps = t.rps, peak_rps = tg[1].peak_rps, fraction_of_peak = t.rps / tg[1].peak_rps,
                    p50_us = t.p50_us, p90_us = t.p90_us, p99_us = t.p99_us, p999_us = t.p999_us,
                    p99_over_p50 = t.p99_us / math.max(t.p50_us, 1), arrivals = tg[1].arrivals or "poisson",
                    calibration_runs = tg[1].calibration_runs, worker_cpu_us_per_request = t.worker_cpu_us_per_request,
                    connections = t.connections, think_ms = t.think_ms, target = "p99/p50 <= 3" }
    end
end
-- the headline: with the peers pinned to the workers' cores (--pin), nginx's rows/s over the
-- W peers' rows/s (wall clock, same cores, same rounds); else the per-CPU-second ratio
local r = S.ratio_inline_100row
if r then
    local pinned = arg[2] == "pinned"
    S.headline_100row = { pinned = pinned,
        ratio = pinned and r.over_peer_wproc_median or r.per_cpu_second_median,
        basis = pinned and "nginx rows/s over the W pinned peer processes' rows/s, wall clock, on the same W cores, median of rounds"
            or "nginx rows per worker CPU-second over the peer's rows per CPU-second (unpinned: wrk shares the cores), median of rounds",
        wall_over_wproc = r.over_peer_wproc_median, per_cpu_second = r.per_cpu_second_median, target = ">= 0.70" }
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
if S.headline_100row then
    local h = S.headline_100row
    io.stderr:write(string.format("headline 100-row: %s (%s; wall/W peers %s, per CPU-second %s; target >= 0.70)\n",
        f(h.ratio), h.pinned and "pinned" or "unpinned", f(h.wall_over_wproc), f(h.per_cpu_second)))
end
if S.inline_100row then
    io.stderr:write(string.format("inline_100row: %s rows/s, worker CPU %s us/request (median)\n",
        f(S.inline_100row.rows_per_s_median, 0), f(S.inline_100row.worker_cpu_us_per_request_median, 1)))
end
for _, name in ipairs { "inline_100row_at80", "inline_100row_at80_paced", "inline_1row_at80", "inline_1row_at80_paced",
                          "inline_100row_at80_open_const", "inline_100row_at80_open_poisson",
                          "inline_1row_at80_open_const", "inline_1row_at80_open_poisson" } do
    local t = S[name]
    if t then
        io.stderr:write(string.format("%-26s %s of peak, p50 %d us, p99 %d us, p99/p50 %s (target <= 3)\n",
            name, f(t.fraction_of_peak), t.p50_us, t.p99_us, f(t.p99_over_p50)))
    end
end
io.write(cjson.encode(F), "\n")
