-- wisp/nginx/run.lua — a decoded request run in the service's configured mode, the one place that knows
-- the modes: in a pool thread's Lua VM (mode thread, and auto for a body of thread_min_bytes or more:
-- decode, run and encode there, wisp.nginx.thread), through the batcher (one row, batching on),
-- session:submit + a yield + session:wait (async), or inline in the event loop (score, or score_raw
-- for raw rows: fused on a GPU); the batch pool; the bad rows every answer lists (a row that is not a
-- probability has its reason); the request's metrics.
--
-- A protocol (wisp.nginx.v1.predict, wisp.nginx.v2.infer) is decode -> run -> encode; it hands run a
-- table P:
--   P.module                      its module's name, required by the thread VM ("protocol" field)
--   P.decode(e, b, body, blen, arg, max_rows) -> d | nil, status, message[, extra]
--       b: an empty batch from the entry's pool; arg: the protocol's one request argument (v1: the
--       body kind, v2: the Inference-Header-Content-Length text). d = {n, b (the batch the rows are
--       in, b or one of the decoder's own: closed after the request), raw (the rows are in e.tr,
--       untransformed), errs (list of {index, error[, line]}), bad (set of 0-based rows)}
--   P.encode(sink, e, d, out, device) -> status: the answer of the n scores out sent through sink
--   P.word(d, errs) -> errs (optional): the scoring's bad-row messages said in the body's terms,
--       called before anything yields
--   P.finish(d) (optional): what d holds given back, once its answer is made
-- A sink is where an answer and its counts go: the worker's sends them (nginx), a thread VM's keeps
-- them for the worker to send and count.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"

local type, tostring, tonumber, pairs, ipairs, assert, pcall = type, tostring, tonumber, pairs, ipairs, assert, pcall
local inc, lbl, observe, record, series = MT.inc, MT.lbl, MT.observe, MT.record, MT.series
local STAGES, STAGE_LABEL, stage_index = MT.STAGES, MT.STAGE_LABEL, MT.stage_index
local log = S.log

local M = {}

local function float_buf(n) return ffi.new("float[?]", n) end

-- ---- bad rows ----------------------------------------------------------------------------------

-- the bad rows of a batch, raw batch or session (its :bad_rows(): {row, line, msg}) -> errs (list
-- of {index, error[, line]}), bad (set: 0-based row -> true); nil, nil for none
local function bad_rows_of(obj, with_line)
    if obj:bad_count() == 0 then return nil, nil end
    local errs, bad = {}, {}
    for _, r in ipairs(obj:bad_rows()) do
        errs[#errs + 1] = { index = r.row, line = with_line and r.line or nil, error = r.msg }
        bad[r.row] = true
    end
    return errs, bad
end
M.bad_rows_of = bad_rows_of

-- every row that is not a probability and that no parser or transform marked bad gets its entry
-- (the invariant of every answer, v1's and v2's: a null has its reason); d.bad, d.errs made when
-- needed. -> the number of bad rows
local function mark_unscored(d, out)
    local bad, errs = d.bad, d.errs
    for i = 0, d.n - 1 do
        local p = out[i]
        if not (p >= 0 and p <= 1) and not (bad and bad[i]) then
            errs, bad = errs or {}, bad or {}
            errs[#errs + 1] = { index = i, error = "the row scored " .. tostring(p) .. ", not a probability" }
            bad[i] = true
        end
    end
    d.bad, d.errs = bad, errs
    return errs and #errs or 0
end

-- ---- the batch pool ------------------------------------------------------------------------------

local function get_batch(e)
    local pool = e.pool
    if pool and #pool > 0 then local b = pool[#pool]; pool[#pool] = nil; return b end
    return assert(S.engine:batch())
end

local function put_batch(e, b)
    if e.closed then b:close(); return end
    e.pool = e.pool or {}
    b:clear()
    e.pool[#e.pool + 1] = b
end

-- ---- the modes -----------------------------------------------------------------------------------

-- mode = "async": session:submit, a yield (other requests run while the device works), then
-- session:wait until this request's batch is done. The session's queue (the C ring's mirror)
-- is the one FIFO: wait() answers the batch C completed, whose owner (e.waiting[batch]) is
-- woken, so each light thread waits only for its own batch, completing older ones on the way.
local function score_async(e, b, out)
    local s = e.session
    local ok, err = s:submit(b, out)
    if not ok then return nil, err end
    local waiting = e.waiting
    if not waiting then waiting = {}; e.waiting = waiting end
    local seq = (e.submitted or 0) + 1
    e.submitted = seq
    local tk = { done = false, seq = seq }
    waiting[b] = tk
    ngx.sleep(0)
    while not tk.done do
        local done, werr = s:wait()
        local owner_b = done
        if not done then
            -- a failed wait took the oldest batch in flight: the lowest submission number
            for wb, t in pairs(waiting) do
                if not owner_b or t.seq < waiting[owner_b].seq then owner_b = wb end
            end
        end
        local owner = owner_b and waiting[owner_b]
        if owner then
            waiting[owner_b] = nil
            owner.done, owner.err = true, (not done) and tostring(werr) or nil
            if owner.sema then owner.sema:post(1) end
        end
        if not tk.done then
            tk.sema = tk.sema or require("ngx.semaphore").new(0)
            tk.sema:wait(60)
        end
    end
    if tk.err then return nil, tk.err end
    return out
end

-- The one row of batch b as the batcher takes it, in each of the batch's value modes
-- (wisp.h): no vals (every feature binary), vals without val_ptr (every feature valued:
-- what the libsvm parser makes of "1 1:0.5", and batch:add of ids with vals), or mixed (the
-- first val_ptr[1] - val_ptr[0] features valued, the rest binary) -> ids, vals, binary ids.
local function batcher_row(b)
    local csr = b:csr()
    local ids, vals, bids = csr.ids, nil, nil
    if csr.vals then
        if csr.val_ptr then
            local nv = csr.val_ptr[2] - csr.val_ptr[1]
            if nv > 0 then
                local v, bb = {}, {}
                for k = 1, #ids do if k <= nv then v[k] = ids[k] else bb[#bb + 1] = ids[k] end end
                ids, vals, bids = v, csr.vals, bb
            end
        else
            vals = csr.vals
        end
    end
    return ids, vals, bids
end

-- raw rows transformed into the request's batch (the batcher and async take feature ids): the
-- batch lists every bad row, the parser's too. -> true | nil, message
local function transform(P, e, d)
    local ok, err = e.tr:transform(d.b)
    if not ok then return nil, tostring(err) end
    if d.b:bad_count() > 0 then
        local errs, bad = bad_rows_of(d.b, true)
        if P.word then errs = P.word(d, errs) end
        d.errs, d.bad = errs, bad
    end
    d.raw = false
    return true
end

local one_f32 = ffi.new("float[1]")

-- score(P, e, d, mode) -> out, session, path ("direct" | "batcher") | nil, status, message
-- mode: "inline" or "async" (in the worker), "inline" in a thread VM.
local function score(P, e, d, mode)
    local n = d.n
    local batcher = e.batcher
    if n == 1 and batcher and not (d.bad and d.bad[0]) then
        -- one row: coalesced with the other single-row requests of this worker
        if d.raw then
            local ok, err = transform(P, e, d)
            if not ok then return nil, 500, err end
        end
        if not (d.bad and d.bad[0]) then
            local ids, vals, bids = batcher_row(d.b)
            local p, err = batcher:score(ids, vals, bids)
            if p == nil then
                if tostring(err):find("queue full", 1, true) then return nil, 503, tostring(err) end
                return nil, 500, "score: " .. tostring(err)
            end
            one_f32[0] = p
            return one_f32, e.bsession, "batcher"
        end
    end
    local s = e.session
    if mode == "async" then
        if d.raw then
            local ok, err = transform(P, e, d)
            if not ok then return nil, 500, err end
        end
        local out, err = score_async(e, d.b, float_buf(n))
        if not out then return nil, 500, "score: " .. tostring(err) end
        return out, s, "direct"
    end
    if n > e.outcap then e.outcap = n * 2; e.out = float_buf(e.outcap) end
    if not d.raw then
        local out, err = s:score(d.b, e.out)
        if not out then return nil, 500, "score: " .. tostring(err) end
        return out, s, "direct"
    end
    local out, err = s:score_raw(e.tr, e.out)
    if not out then return nil, 500, "score: " .. tostring(err) end
    if s:bad_count() > (d.errs and #d.errs or 0) then
        -- the transform refused rows the parser took: the session lists every bad row (the
        -- parser's too), with the transform's messages
        local errs, bad = bad_rows_of(s, true)
        if P.word then errs = P.word(d, errs) end
        d.errs, d.bad = errs, bad
    end
    return out, s, "direct"
end

-- ---- metrics of a request ----------------------------------------------------------------------------

-- the histogram series a model's requests observe, resolved once per model name
local series_by_name = {}
local function model_series(name)
    local ps = series_by_name[name]
    if not ps then
        ps = { parse = series("wisp_stage_seconds", lbl(name, 'stage="parse"')),
               rows = series("wisp_batch_rows", lbl(name, 'path="direct"')),
               request = series("wisp_request_seconds", lbl(name)), stages = {}, stage_idx = {} }
        for i, stg in ipairs(STAGES) do
            ps.stages[i] = series("wisp_stage_seconds", lbl(name, STAGE_LABEL[stg]))
            ps.stage_idx[i] = stage_index(stg)
        end
        series_by_name[name] = ps
    end
    return ps
end

local DECODE_KIND = { [400] = 'kind="bad_request"', [413] = 'kind="too_many_rows"',
    [415] = 'kind="unsupported_media_type"' }

-- ---- decode -> run -> encode ---------------------------------------------------------------------------

-- serve(P, sink, e, body, blen, arg, mode, max_rows, in_worker) -> status answered, rows, the session
-- that scored (nil when nothing was scored). in_worker: the request's histograms are recorded
-- (a thread VM's counts go through its sink; the worker observes its rows and stages).
local function serve(P, sink, e, body, blen, arg, mode, max_rows, in_worker)
    local t0 = in_worker and S.clock() or 0
    local name = e.name
    local b = get_batch(e)
    local d, st, msg, extra = P.decode(e, b, body, blen, arg, max_rows)
    if not d then
        put_batch(e, b)
        sink.inc("wisp_errors_total", DECODE_KIND[st] or 'kind="internal"')
        return sink.fail(st, msg, extra)
    end
    local ps = in_worker and model_series(name)
    if ps then record(ps.parse, S.clock() - t0) end
    local out, s, path = score(P, e, d, mode)
    local status
    if not out then
        st, msg = s, path
        if st == 503 then sink.inc("wisp_batcher_rejected_total", lbl(name))
        else sink.inc("wisp_errors_total", 'kind="score"') end
        status = sink.fail(st, msg)
    else
        local n = d.n
        local nbad = mark_unscored(d, out)
        sink.inc("wisp_rows_total", lbl(name), n)
        if nbad > 0 then sink.inc("wisp_row_errors_total", lbl(name), nbad) end
        status = P.encode(sink, e, d, out, s:last_device())
        if status == 400 then sink.inc("wisp_errors_total", 'kind="all_rows_bad"') end
        if ps and path == "direct" then
            record(ps.rows, n)
            local stages, sidx = ps.stages, ps.stage_idx
            -- the five stages (wisp.nginx.metrics' STAGES) unrolled: a loop here is a trace of its own
            record(stages[1], s:last_stat(sidx[1]) * 1e-9)
            record(stages[2], s:last_stat(sidx[2]) * 1e-9)
            record(stages[3], s:last_stat(sidx[3]) * 1e-9)
            record(stages[4], s:last_stat(sidx[4]) * 1e-9)
            record(stages[5], s:last_stat(sidx[5]) * 1e-9)
        end
    end
    if d.b ~= b then d.b:close() end
    if P.finish then P.finish(d) end
    put_batch(e, b)
    if ps then record(ps.request, S.clock() - t0) end
    if not out then return status end
    return status, d.n, s
end
M.serve = serve

-- ---- sinks ---------------------------------------------------------------------------------------------

-- the worker's: the answer sent (with the binary extension's header length), the counts made
local worker_sink = {
    send = function(status, text, ctype, hlen)
        if hlen then ngx.header["Inference-Header-Content-Length"] = hlen end
        return H.send(status, text, ctype)
    end,
    fail = H.fail,
    inc = inc,
}
M.worker_sink = worker_sink

-- a thread VM's (wisp.nginx.thread): the answer and the counts kept, for the worker
function M.thread_sink()
    local k = { counts = {} }
    k.send = function(status, text, ctype, hlen)
        k.status, k.text, k.ctype, k.hlen = status, text, ctype, hlen
        return status
    end
    k.fail = function(status, msg, extra) return k.send(status, H.error_body(msg, extra)) end
    k.inc = function(metric, labels, v)
        k.counts[#k.counts + 1] = metric .. "\t" .. labels .. "\t" .. tostring(v or 1)
    end
    return k
end

-- ---- placement: the thread pool or the worker ------------------------------------------------------------

-- The request in a pool thread's VM, with its own copy of exactly the version e is (wisp.nginx.thread):
-- -> the status sent, or nil when this worker is to run it (the VM could not map that version: the
-- file at the path is another one now, or broken; or the mode was the device's default and nginx.conf
-- has no such thread pool: this worker runs inline from now on, and says so once).
local function in_thread(P, e, body, blen, arg)
    local cfg = S.cfg
    if type(body) ~= "string" then body = ffi.string(body, blen) end
    local sema = S.thread_sema
    local got, werr = sema:wait(10)
    if not got then
        inc("wisp_errors_total", 'kind="thread_busy"')
        return H.fail(503, "worker threads busy: " .. tostring(werr))
    end
    local ok, status, text, ctype, hlen, counts, n, kns, tns = ngx.run_worker_thread(cfg.thread_pool,
        "wisp.nginx.thread", "serve", P.module, e.name, e.path, e.stamp, e.checksum, e.device_asked, body, arg,
        cfg.max_rows_per_request)
    sema:post(1)
    if ok and status ~= 0 then
        -- the VM's counts made, its rows observed, its answer sent
        if counts ~= "" then
            for line in counts:gmatch("[^\n]+") do
                local metric, labels, v = line:match("^([^\t]+)\t([^\t]*)\t([^\t]+)$")
                if metric then inc(metric, labels, tonumber(v)) end
            end
        end
        if n and n > 0 then
            local name = e.name
            observe("wisp_batch_rows", lbl(name, 'path="thread"'), n)
            observe("wisp_stage_seconds", lbl(name, 'stage="kernel"'), kns / 1e9)
            observe("wisp_stage_seconds", lbl(name, 'stage="total"'), tns / 1e9)
        end
        return worker_sink.send(status, text, ctype ~= "" and ctype or nil, hlen > 0 and hlen or nil)
    elseif ok then
        inc("wisp_errors_total", 'kind="thread_stale"')
        return nil
    end
    if not (cfg.mode_by_device and tostring(status):find("not found", 1, true)) then
        inc("wisp_errors_total", 'kind="thread"')
        return H.fail(500, "worker thread: " .. tostring(status))
    end
    log(ngx.WARN, "mode ", cfg.mode, " (the default on this device) needs `thread_pool ", cfg.thread_pool,
        " threads=2;` in nginx.conf (", tostring(status), "): scoring inline")
    cfg.mode = "inline"
    return nil
end

-- request(P, e, body, blen, arg) -> the status sent: the request on the entry e, decoded, run and
-- answered where the configured mode puts it
local function request(P, e, body, blen, arg)
    local cfg = S.cfg
    local mode = cfg.mode
    if (mode == "thread" or (mode == "auto" and blen >= cfg.thread_min_bytes)) and type(arg) ~= "table" then
        local status = in_thread(P, e, body, blen, arg)
        if status then return status end
        mode = "inline"
    end
    return (serve(P, worker_sink, e, body, blen, arg, mode == "async" and "async" or "inline",
                  cfg.max_rows_per_request, true))
end

-- held(P, e, body, blen, arg) -> the status sent: request() with the entry held (inflight) until the
-- answer is made, whatever the mode waits for, and released on every path (a retired version
-- closes after its last request); an error raised on the way is answered 500
function M.held(P, e, body, blen, arg)
    e.inflight = e.inflight + 1
    local ok, status = pcall(request, P, e, body, blen, arg)
    e:release()
    if not ok then
        inc("wisp_errors_total", 'kind="internal"')
        return H.fail(500, "internal error: " .. tostring(status))
    end
    return status
end

M.get_batch = get_batch
M.put_batch = put_batch
M.float_buf = float_buf

return M
