-- wisp/nginx/predict.lua — POST /v1/models/NAME:predict: the body read, the entry held, then
-- parse, score and answer in the worker's mode (inline, async, thread, auto; single rows
-- through the batcher), with the request's metrics.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local R = require "wisp.nginx.request"
local I = require "wisp.nginx.instances"
local A = require "wisp.nginx.answer"
local MD = require "wisp.nginx.models"

local type, tostring, tonumber, pairs, pcall, assert = type, tostring, tonumber, pairs, pcall, assert
local send, fail, method_not_allowed, body_kind = H.send, H.fail, H.method_not_allowed, H.body_kind
local inc, lbl, observe, record, series = MT.inc, MT.lbl, MT.observe, MT.record, MT.series
local STAGES, STAGE_LABEL, stage_index = MT.STAGES, MT.STAGE_LABEL, MT.stage_index
local parse_into, batch_bad_rows = R.parse_into, R.batch_bad_rows
local score = require("wisp.nginx.score").score
local instance_errors, inst_firsts, inst_starts = I.instance_errors, I.firsts, I.starts
local encode_answer, float_buf = A.encode_answer, MD.float_buf
local log = S.log

local M = {}

-- The one row of batch b as the batcher takes it, in each of the batch's value modes
-- (wisp.h): no vals (every feature binary), vals without val_ptr (every feature valued:
-- what the libsvm parser makes of "1 1:0.5", and batch:add of ids with vals), or mixed (the
-- first val_ptr[1] - val_ptr[0] features valued, the rest binary) -> ids, vals, binary ids.
-- v1's predict and v2's infer (wisp.nginx.v2) both use it.
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

-- the histogram series a model's inline predict path observes, resolved once per model
local function predict_series(slot)
    local ps = slot.series
    if not ps then
        local name = slot.name
        ps = { parse = series("wisp_stage_seconds", lbl(name, 'stage="parse"')),
               rows = series("wisp_batch_rows", lbl(name, 'path="direct"')),
               request = series("wisp_request_seconds", lbl(name)), stages = {}, stage_idx = {} }
        for i, stg in ipairs(STAGES) do
            ps.stages[i] = series("wisp_stage_seconds", lbl(name, STAGE_LABEL[stg]))
            ps.stage_idx[i] = stage_index(stg)
        end
        slot.series = ps
    end
    return ps
end

local predict_entry

local function predict(slot, name, method)
    if method ~= "POST" then return method_not_allowed("POST") end
    local kind, ctype = body_kind(ngx.var.content_type or "")
    if not kind then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "unsupported Content-Type '" .. ctype .. "' (use application/json, application/x-ndjson, application/jsonl, text/plain or text/x-libsvm)")
    end
    local enc = ngx.var.http_content_encoding
    if enc and enc ~= "" and enc:lower() ~= "identity" then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "Content-Encoding " .. enc .. " is not supported (send the body uncompressed)")
    end
    if not slot.cur then
        inc("wisp_errors_total", 'kind="not_ready"')
        return fail(503, "model '" .. name .. "' is not loaded", { reload_error = slot.reload_error and slot.reload_error.error })
    end
    -- libsvm and JSON lines go to the C parsers straight from nginx's body buffer (no Lua
    -- string: no copy, no interning, no garbage); JSON, the thread pool and a body in a
    -- temporary file take the Lua string
    local mode = S.cfg.mode
    local body, blen = H.read_body(kind ~= "json" and mode ~= "thread")
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body")
    end
    -- the version that answers: the entry serving now that the body is here (reading it
    -- yields: a reload may have swapped the entry meanwhile), held (inflight) until the
    -- answer is made, whatever the mode waits for, and released on every path
    local e = slot.cur
    if not e then
        inc("wisp_errors_total", 'kind="not_ready"')
        return fail(503, "model '" .. name .. "' is not loaded", { reload_error = slot.reload_error and slot.reload_error.error })
    end
    e.inflight = e.inflight + 1
    local ok, status = pcall(predict_entry, e, slot, name, kind, body, blen, mode)
    e:release()
    if not ok then
        inc("wisp_errors_total", 'kind="internal"')
        return fail(500, "internal error: " .. tostring(status))
    end
    return status
end

-- predict's work on the entry e it holds: parse, score, answer (-> the status sent)
predict_entry = function(e, slot, name, kind, body, blen, mode)
    local cfg = S.cfg
    local max_rows = cfg.max_rows_per_request
    local t0 = S.clock()                       -- request latency and the parse stage start here

    if mode == "thread" or (mode == "auto" and blen >= cfg.thread_min_bytes) then
        if type(body) ~= "string" then body = ffi.string(body, blen) end
        local thread_sema = S.thread_sema
        local got, werr = thread_sema:wait(10)
        if not got then
            inc("wisp_errors_total", 'kind="thread_busy"')
            return fail(503, "worker threads busy: " .. tostring(werr))
        end
        local ok, status, text, n, nbad, dev, kns, tns = ngx.run_worker_thread(cfg.thread_pool, "wisp.nginx.thread",
            "predict", name, e.path, e.stamp, e.checksum, e.device_asked, kind, body, max_rows)
        thread_sema:post(1)
        if ok and status == 0 then
            -- the thread's VM could not map this exact version (the file at the path is
            -- another one now, or broken): this worker scores it inline, with the entry it holds
            inc("wisp_errors_total", 'kind="thread_stale"')
            ok, mode = false, "inline"
        elseif ok then
            if n and n > 0 then
                inc("wisp_rows_total", lbl(name), n)
                if nbad > 0 then inc("wisp_row_errors_total", lbl(name), nbad) end
                observe("wisp_batch_rows", lbl(name, 'path="thread"'), n)
                observe("wisp_stage_seconds", lbl(name, 'stage="kernel"'), kns / 1e9)
                observe("wisp_stage_seconds", lbl(name, 'stage="total"'), tns / 1e9)
            end
            return send(status, text)
        elseif mode ~= "inline" then           -- (inline: the stale version above, this request only)
            if not (cfg.mode_by_device and tostring(status):find("not found", 1, true)) then
                inc("wisp_errors_total", 'kind="thread"')
                return fail(500, "worker thread: " .. tostring(status))
            end
            -- the mode was the device's default (mode = "device"), not asked for, and nginx.conf
            -- has no such thread pool: this worker scores inline from now on, this request too,
            -- and says so once
            log(ngx.WARN, "mode ", cfg.mode, " (the default on this device) needs `thread_pool ", cfg.thread_pool,
                " threads=2;` in nginx.conf (", tostring(status), "): scoring inline")
            cfg.mode, mode = "inline", "inline"
        end
    end

    local b = get_batch(e)
    local ps = predict_series(slot)
    -- raw rows stay raw (wisp_session_score_raw: fused on a GPU) unless mode = async
    -- (session:submit takes a batch)
    local ok, n, errs, bad, extra = pcall(parse_into, e, b, kind, body, max_rows, mode ~= "async", blen)
    if not ok then
        put_batch(e, b)
        return fail(500, "internal error: " .. tostring(n))
    end
    if not n then
        put_batch(e, b)
        inc("wisp_errors_total", errs == 413 and 'kind="too_many_rows"' or errs == 400 and 'kind="bad_request"'
            or errs == 415 and 'kind="unsupported_media_type"' or 'kind="internal"')
        return fail(errs, bad, extra)
    end
    local raw = extra == true               -- the rows are in e.tr, not yet transformed
    if raw and n == 1 and e.batcher and not (bad and bad[0]) then
        -- one row for the batcher, which takes feature ids: transform it here
        local ok, terr = e.tr:transform(b)
        if not ok then
            put_batch(e, b)
            return fail(500, tostring(terr))
        end
        errs, bad = batch_bad_rows(b, true)
        if kind == "json" then errs = instance_errors(errs, inst_firsts(), inst_starts()) end
        raw = false
    end
    record(ps.parse, S.clock() - t0)
    inc("wisp_rows_total", lbl(name), n)
    if errs and #errs > 0 then inc("wisp_row_errors_total", lbl(name), #errs) end

    local status, text
    if n == 1 and e.batcher and not raw and not (bad and bad[0]) then
        -- one row: coalesced with the other single-row requests of this worker
        local ids, vals, bids = batcher_row(b)
        local p, err = e.batcher:score(ids, vals, bids)
        put_batch(e, b)
        if p == nil then
            if tostring(err):find("queue full", 1, true) then
                inc("wisp_batcher_rejected_total", lbl(name))
                return fail(503, tostring(err))
            end
            return fail(500, tostring(err))
        end
        local one = ffi.new("float[1]", p)
        status, text = encode_answer(e, 1, one, bad, errs, e.bsession:last_device())
    else
        local out, err, added
        local sess = e.session
        if cfg.mode == "async" then
            out, err = score_async(e, b, float_buf(n))
            if not out then err = "score: " .. tostring(err) end
        else
            out, errs, bad, added = score(e, b, kind, n, errs, bad, raw)
            if not out then err = errs
            elseif added > 0 then inc("wisp_row_errors_total", lbl(name), added) end
        end
        if not out then
            put_batch(e, b)
            inc("wisp_errors_total", 'kind="score"')
            return fail(500, tostring(err))
        end
        record(ps.rows, n)
        local stages, sidx = ps.stages, ps.stage_idx
        record(stages[1], sess:last_stat(sidx[1]) * 1e-9)
        record(stages[2], sess:last_stat(sidx[2]) * 1e-9)
        record(stages[3], sess:last_stat(sidx[3]) * 1e-9)
        record(stages[4], sess:last_stat(sidx[4]) * 1e-9)
        record(stages[5], sess:last_stat(sidx[5]) * 1e-9)
        status, text = encode_answer(e, n, out, bad, errs, sess:last_device())
        put_batch(e, b)
    end
    if status ~= 200 then inc("wisp_errors_total", 'kind="all_rows_bad"') end
    record(ps.request, S.clock() - t0)
    return send(status, text)
end

M.predict = predict
M.score_async = score_async        -- the v2 infer path (wisp.nginx.v2) shares the batch pool and async scoring
M.get_batch = get_batch
M.put_batch = put_batch
M.batcher_row = batcher_row

return M
