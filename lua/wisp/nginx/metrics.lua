-- wisp/nginx/metrics.lua — the service's metrics: per-worker counters and histograms recorded on
-- the request path without building strings, flushed to the shared dict, and the Prometheus
-- text summed over the workers; the device stages of a session's last call.

local ffi = require "ffi"
local S = require "wisp.nginx.state"

local tostring, tonumber, pairs, ipairs, next = tostring, tonumber, pairs, ipairs, next
local fmt, concat = string.format, table.concat

local M = {}

-- the device stages of the session's last call (profiling is on): ns
local STAGES = { "ns_h2d", "ns_kernel", "ns_d2h", "ns_sync", "ns_total" }

local function stage_index(name) return S.wisp.stat_index[name] end

local function last_stages(s)
    local t = {}
    for _, name in ipairs(STAGES) do t[name] = s:last_stat(stage_index(name)) end
    return t
end

local acc = {}                -- key -> amount since the last flush
local BATCH_BUCKETS = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384 }
local TIME_BUCKETS = { 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                       0.1, 0.25, 0.5, 1, 2.5 }
local HIST = {
    wisp_batch_rows = { help = "rows per scored batch", buckets = BATCH_BUCKETS },
    wisp_event_loop_lag_seconds = { help = "how late each worker's lag timer fires (every lag_check_s): "
                                          .. "time its event loop spent on other work or off the CPU",
                                    buckets = { 1e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.5, 1 } },
    wisp_request_seconds = { help = "request latency inside the handler (body read to answer)",
        buckets = TIME_BUCKETS },
    wisp_stage_seconds = { help = "time per stage of each scored batch (parse: body to batch; "
        .. "h2d/kernel/d2h/sync/total: the session's profile)", buckets = TIME_BUCKETS },
}
local COUNTER_HELP = {
    wisp_requests_total = "HTTP requests by model, endpoint and status code",
    wisp_rows_total = "rows received in predict requests",
    wisp_row_errors_total = "rows answered with a null prediction (malformed input)",
    wisp_errors_total = "requests refused, by kind",
    wisp_model_reloads_total = "model (re)loads by result (ok; failed: the file did not load; "
        .. "refused: changed in place)",
    wisp_fallbacks_total = "batches moved from a GPU to the CPU",
    wisp_batcher_rejected_total = "single rows refused because the batcher queue was full",
    wisp_model_requests_total = "scoring requests (v1 predict, v2 infer) answered by each model version",
}

local inc_keys = {}
local function inc(name, labels, n)
    local byl = inc_keys[name]
    if not byl then byl = {}; inc_keys[name] = byl end
    local k = byl[labels]
    if not k then k = name .. "\t" .. labels; byl[labels] = k end
    acc[k] = (acc[k] or 0) + (n or 1)
end

-- A histogram series (name + labels), made once: bucket counts and sum since the last
-- flush in a Lua array (no string keys on the request path), with its shared-dict keys.
local series_by = {}          -- name -> labels -> series
local series_all = {}         -- every series of this worker, for flush()
local function series(name, labels)
    local byl = series_by[name]
    if not byl then byl = {}; series_by[name] = byl end
    local sr = byl[labels]
    if not sr then
        local buckets = HIST[name].buckets
        local base = name .. "\t" .. labels
        sr = { buckets = buckets, nb = #buckets, counts = {}, keys = {}, sum = 0, sumkey = base .. "\tsum" }
        for j = 1, #buckets + 1 do sr.counts[j] = 0; sr.keys[j] = base .. "\t" .. j end
        byl[labels] = sr
        series_all[#series_all + 1] = sr
    end
    return sr
end

local function hobserve(sr, v)
    local buckets, nb = sr.buckets, sr.nb
    local i = nb + 1
    for j = 1, nb do if v <= buckets[j] then i = j; break end end
    local counts = sr.counts
    counts[i] = counts[i] + 1
    sr.sum = sr.sum + v
end

local function observe(name, labels, v) return hobserve(series(name, labels), v) end

-- The request path only records (series, value) pairs; they are sorted into buckets at
-- each flush (every flush_s, and before /metrics answers) in one loop that the JIT
-- compiles: the bucket search per value is a loop with an early exit, which LuaJIT leaves
-- to its interpreter when each run of it is short (8 values a request: ~3 µs).
local PENDING_MAX = 16384
local pend_sr, pend_v, pend_n = {}, ffi.new("double[?]", PENDING_MAX + 1), 0

local function drain_pending()
    local n = pend_n
    pend_n = 0
    for k = 1, n do hobserve(pend_sr[k], pend_v[k]) end
end

local function record(sr, v)
    local n = pend_n + 1
    pend_sr[n] = sr
    pend_v[n] = v
    pend_n = n
    if n >= PENDING_MAX then drain_pending() end
end

local gauges = {}             -- key -> value (set, not added)

function M.flush()
    drain_pending()
    local cfg = S.cfg
    if not cfg then return end
    local dict = ngx.shared[cfg.shm]
    if not dict then return end
    for k, v in pairs(acc) do
        if v ~= 0 then
            local ok, err = dict:incr(k, v, 0)
            if not ok then ngx.log(ngx.WARN, "wisp: metrics: ", err) end
        end
        acc[k] = nil
    end
    for _, sr in ipairs(series_all) do
        local counts, keys = sr.counts, sr.keys
        for j = 1, sr.nb + 1 do
            local v = counts[j]
            if v ~= 0 then
                local ok, err = dict:incr(keys[j], v, 0)
                if not ok then ngx.log(ngx.WARN, "wisp: metrics: ", err) end
                counts[j] = 0
            end
        end
        if sr.sum ~= 0 then dict:incr(sr.sumkey, sr.sum, 0); sr.sum = 0 end
    end
    for k, v in pairs(gauges) do
        if v == false then dict:delete(k) else dict:set(k, v) end
        gauges[k] = nil
    end
end

-- label text 'model="m"[,version="v"][,extra]', memoised (the hot path builds no strings
-- for metrics); version: a model version's name, for the series labelled by version
local lbl_cache = {}
local function lbl(model, extra, version)
    local byx = lbl_cache[model]
    if not byx then byx = {}; lbl_cache[model] = byx end
    local k = version and (version .. "\t" .. (extra or "")) or (extra or "")
    local l = byx[k]
    if not l then
        l = fmt('model="%s"', model)
        if version then l = l .. fmt(',version="%s"', version) end
        if extra then l = l .. "," .. extra end
        byx[k] = l
    end
    return l
end
-- count_request(name, endpoint, status) -> status: wisp_requests_total{model, endpoint, code} + 1,
-- the label memoised by model, endpoint and status (no string made a request)
local req_labels = {}
local function count_request(name, endpoint, status)
    local byn = req_labels[name]
    if not byn then byn = {}; req_labels[name] = byn end
    local bye = byn[endpoint]
    if not bye then bye = {}; byn[endpoint] = bye end
    local l = bye[status]
    if not l then
        l = lbl(name, fmt('endpoint="%s",code="%d"', endpoint, status))
        bye[status] = l
    end
    inc("wisp_requests_total", l)
    return status
end

local STAGE_LABEL = {}
for _, stg in ipairs(STAGES) do STAGE_LABEL[stg] = 'stage="' .. stg:sub(4) .. '"' end

local function esc(s) return (tostring(s):gsub('[\\"]', "\\%0"):gsub("\n", "\\n")) end

-- The Prometheus text of every worker's metrics.
function M.metrics_text()
    M.flush()
    local dict = ngx.shared[S.cfg.shm]
    local keys = dict:get_keys(0)
    table.sort(keys)
    local counters, hists, gaugev = {}, {}, {}
    for _, k in ipairs(keys) do
        local v = dict:get(k)
        local name, labels, rest = k:match("^([^\t]+)\t([^\t]*)\t?(.*)$")
        if name == "g" then
            gaugev[#gaugev + 1] = { labels, rest, v }
        elseif name and HIST[name] then
            local h = hists[name] or {}
            hists[name] = h
            local s = h[labels] or { counts = {}, sum = 0 }
            h[labels] = s
            if rest == "sum" then s.sum = v else s.counts[tonumber(rest)] = v end
        elseif name then
            local c = counters[name] or {}
            counters[name] = c
            c[#c + 1] = { labels, v }
        end
    end
    local out = {}
    local function add(s) out[#out + 1] = s end
    local cnames = {}
    for name in pairs(COUNTER_HELP) do cnames[#cnames + 1] = name end
    table.sort(cnames)
    for _, name in ipairs(cnames) do
        add(fmt("# HELP %s %s\n# TYPE %s counter\n", name, COUNTER_HELP[name], name))
        for _, c in ipairs(counters[name] or {}) do add(fmt("%s{%s} %.17g\n", name, c[1], c[2])) end
    end
    local hnames = {}
    for name in pairs(HIST) do hnames[#hnames + 1] = name end
    table.sort(hnames)
    for _, name in ipairs(hnames) do
        local H = HIST[name]
        add(fmt("# HELP %s %s\n# TYPE %s histogram\n", name, H.help, name))
        local labs = {}
        for l in pairs(hists[name] or {}) do labs[#labs + 1] = l end
        table.sort(labs)
        for _, l in ipairs(labs) do
            local s = hists[name][l]
            local cum = 0
            local sep = l ~= "" and "," or ""
            for i = 1, #H.buckets + 1 do
                cum = cum + (s.counts[i] or 0)
                local le = H.buckets[i] and fmt("%.6g", H.buckets[i]) or "+Inf"
                add(fmt('%s_bucket{%s%sle="%s"} %d\n', name, l, sep, le, cum))
            end
            local ls = l ~= "" and "{" .. l .. "}" or ""
            add(fmt("%s_sum%s %.9g\n%s_count%s %d\n", name, ls, s.sum, name, ls, cum))
        end
    end
    -- gauges: per model, set by the workers (the last writer wins; workers agree)
    add("# HELP wisp_device_info the device each model scores on (value 1)\n# TYPE wisp_device_info gauge\n")
    add("# HELP wisp_model_ready 1 when the model is loaded and its device usable\n# TYPE wisp_model_ready gauge\n")
    add("# HELP wisp_model_version_ready 1 for each version served (ready), by model and version\n"
        .. "# TYPE wisp_model_version_ready gauge\n")
    add("# HELP wisp_model_warmup_seconds the warm-up of each version served (a batch on each device it scores on)\n"
        .. "# TYPE wisp_model_warmup_seconds gauge\n")
    for _, g in ipairs(gaugev) do
        local kind, labels = g[1], g[2]
        if kind == "device" then add(fmt('wisp_device_info{%s,device="%s"} 1\n', labels, esc(g[3])))
        elseif kind == "ready" then add(fmt("wisp_model_ready{%s} %s\n", labels, tostring(g[3])))
        elseif kind == "version" then add(fmt('wisp_model_version_info{%s,version="%s"} 1\n', labels, esc(g[3])))
        elseif kind == "vready" then add(fmt("wisp_model_version_ready{%s} %s\n", labels, tostring(g[3])))
        elseif kind == "warmup" then add(fmt("wisp_model_warmup_seconds{%s} %.6g\n", labels, g[3]))
        elseif kind == "vid" then add(fmt('wisp_model_version_id_info{%s,id="%s"} 1\n', labels, esc(g[3]))) end
    end
    return concat(out)
end

local function set_gauges(slot)
    local e = slot.cur
    local l = lbl(slot.name)
    gauges["g\tready\t" .. l] = e and 1 or 0
    if e then
        local dev = e.session and e.session:last_device()
        gauges["g\tdevice\t" .. l] = dev and dev ~= "" and dev or e.device or "?"
        gauges["g\tversion\t" .. l] = e.version
    end
    -- by version: each version slot's (a single-file model: its one version "1")
    for v, vs in pairs(slot.versions or {}) do
        local vl = lbl(slot.name, nil, v)
        local ve = vs.cur
        local ok = ve ~= nil and not ve.retired and not slot.unloaded
        gauges["g\tvready\t" .. vl] = ok and 1 or 0
        gauges["g\twarmup\t" .. vl] = (ok and ve.warmup_ms) and ve.warmup_ms / 1e3 or false
        if ok then gauges["g\tvid\t" .. vl] = ve.version_id else gauges["g\tvid\t" .. vl] = false end
    end
end

-- a model no longer served (its directory left the repository): its gauges leave the shared dict
local function drop_model_gauges(name)
    local l = lbl(name)
    gauges["g\tready\t" .. l] = false
    gauges["g\tdevice\t" .. l] = false
    gauges["g\tversion\t" .. l] = false
end

-- a version no longer served: its gauges leave the shared dict
local function drop_version_gauges(name, v)
    local vl = lbl(name, nil, v)
    gauges["g\tvready\t" .. vl] = false
    gauges["g\twarmup\t" .. vl] = false
    gauges["g\tvid\t" .. vl] = false
end

M.STAGES = STAGES
M.STAGE_LABEL = STAGE_LABEL
M.stage_index = stage_index
M.last_stages = last_stages
M.inc = inc
M.series = series
M.hobserve = hobserve
M.observe = observe
M.record = record
M.lbl = lbl
M.count_request = count_request
M.set_gauges = set_gauges
M.drop_version_gauges = drop_version_gauges
M.drop_model_gauges = drop_model_gauges

return M
