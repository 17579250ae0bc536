-- bench_nginx_report.lua — summarises scripts/bench_nginx.sh's runs (one JSON object a line) into its "figures": medians over rounds, ratios to the peer, p99/p50 at 80%.
--   wisp run scripts/bench_nginx_report.lua RUNS.jsonl > figures.json
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
    local two = {}
    local a, b = groups.peer_100row_2proc_a or {}, groups.peer_100row_2proc_b or {}
    for _, t in ipairs(ng) do
        for i, pa in ipairs(a) do
            local pb = b[i]
            if pa.round == t.round and pb then two[#two + 1] = t.rows_per_s / (pa.parse_score_rows_per_s + pb.parse_score_rows_per_s) end
        end
    end
    local cpu = {}
    for _, t in ipairs(ng) do
        for _, p in ipairs(p1) do
            if p.round == t.round and t.rows_per_worker_cpu_s and p.parse_score_rows_per_cpu_s then
                cpu[#cpu + 1] = t.rows_per_worker_cpu_s / p.parse_score_rows_per_cpu_s
            end
        end
    end
    table.sort(per); table.sort(two); table.sort(cpu)
    return { over_peer_1proc_per_round = per, over_peer_1proc_median = per[math.floor((#per + 1) / 2)],
             over_peer_2proc_per_round = two, over_peer_2proc_median = two[math.floor((#two + 1) / 2)],
             per_cpu_second_per_round = cpu, per_cpu_second_median = cpu[math.floor((#cpu + 1) / 2)],
             target = ">= 0.70" }
end
S.ratio_inline_100row = ratios("inline_100row")
S.ratio_async_100row = ratios("async_100row")
S.ratio_thread_100row = ratios("thread_100row")
S.ratio_auto_100row = ratios("auto_100row")
for _, name in ipairs { "inline_100row_at80", "inline_1row_at80" } do
    local g, tg = groups[name], groups[name .. "_target"]
    if g and tg then
        local t = g[1]
        S[name] = { rps = t.rps, peak_rps = tg[1].peak_rps, fraction_of_peak = t.rps / tg[1].peak_rps,
                    p50_us = t.p50_us, p99_us = t.p99_us, p99_over_p50 = t.p99_us / math.max(t.p50_us, 1),
                    connections = t.connections, think_ms = t.think_ms, target = "p99/p50 <= 3" }
    end
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
io.write(cjson.encode(F), "\n")
