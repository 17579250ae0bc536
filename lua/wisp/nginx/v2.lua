-- wisp/nginx/v2.lua — the Open Inference Protocol (KServe "v2") over HTTP/REST: its routes (/v2,
-- health, model metadata and readiness, infer, the model repository extension), the metadata
-- answers (inputs and outputs with datatypes and shapes, platform "wisp"), and infer: a request's
-- tensors (wisp.nginx.tensor) scored through the service's one scoring route (wisp.nginx.score),
-- answered as JSON tensors or with the binary tensor data extension.
--
-- Placement: as v1's predict (wisp.nginx.predict), in every mode. thread (and auto for a body
-- of thread_min_bytes or more): the whole infer (decode, rows, score, answer) in a pool
-- thread's VM with its own copy of exactly the version the request holds (wisp.nginx.thread
-- "infer"; a stale copy: inline in the worker); one row with batching on: the worker's
-- batcher; async: session:submit, a yield, session:wait; inline: in the worker. run_infer is
-- the one body of all of them: it answers through a sink (the worker's sends and counts; the
-- thread VM's keeps the answer and the counts for the worker).
--
-- Versions: models.lua's MD.resolve/MD.versions/MD.repository_* when it has them; without
-- them a model is its one file, version "1" (slot.cur).
--
-- Bad rows: the protocol has no per-row errors. A row wisp cannot score (a negative index, a
-- value that is not a finite float32, a string where a number is expected, ...) scores NaN
-- (null in a JSON output), its 0-based index is in the output "bad_rows" (INT64 [k]), and the
-- response parameter "bad_row_reasons" is a JSON text of the list [{"index": i, "error": "..."}]
-- (v1's "errors" entries); the other rows are scored. When no row can be scored: 400, as v1.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local T = require "wisp.nginx.tensor"
local A = require "wisp.nginx.answer"
local P = require "wisp.nginx.predict"

local type, tostring, tonumber, pairs, ipairs, pcall = type, tostring, tonumber, pairs, ipairs, pcall
local fmt, concat, sort = string.format, table.concat, table.sort
local send, send_json, fail, method_not_allowed = H.send, H.send_json, H.fail, H.method_not_allowed
local inc, lbl = MT.inc, MT.lbl
local models, model_names = S.models, S.model_names

local M = {}

local function versions_of(name)
    if MD.versions then return MD.versions(name) end
    local slot = models[name]
    if not slot then return nil end
    return { { version = "1", state = slot.cur and "READY" or "UNAVAILABLE",
               reason = (not slot.cur and slot.reload_error) and slot.reload_error.error or nil } }
end

-- (name, version or nil) -> entry, slot | nil, status, message
local function resolve(name, version)
    if version == nil then
        -- the default version, as MD.resolve's first rule picks it (the slot's serving entry,
        -- unless retired), without its call: MD.resolve makes a closure (models.lua), which
        -- LuaJIT does not compile, and an infer calls this twice
        local slot = models[name]
        local e = slot and slot.cur
        if e and not e.retired then return e, slot end
    end
    if MD.resolve then
        local e, slot, msg = MD.resolve(name, version)
        if e then return e, slot end
        return nil, slot or 500, msg or "no such model version"
    end
    local slot = models[name]
    if not slot then return nil, 404, fmt("unknown model '%s'", name) end
    if version ~= nil and version ~= "1" then
        return nil, 404, fmt("model '%s' has no version '%s' (a single-file model is version 1)", name, version)
    end
    local e = slot.cur
    if not e then
        return nil, 503, fmt("model '%s' is not loaded%s", name,
                             slot.reload_error and (": " .. tostring(slot.reload_error.error)) or "")
    end
    return e, slot
end

-- the version's name: models.lua's entry.version ("1", "2") with versions, else "1"
local function version_name(e, asked) return tostring(asked or (MD.resolve and e.version) or "1") end

-- the tensor metadata of a model (cached on the entry)
local function tensors_meta(e)
    if e.v2_meta then return e.v2_meta end
    local inputs, params
    local outputs = {
        { name = "probability", datatype = "FP32", shape = { -1 } },
        { name = "bad_rows", datatype = "INT64", shape = { -1 },
          parameters = { description = "0-based indices of the rows that could not be scored (their probability is NaN)" } },
    }
    if e.tr then
        inputs = {}
        for _, inp in ipairs(e.inputs) do
            local dt = inp.dtype == "string" and "BYTES" or inp.dtype == "int64" and "INT64" or "FP32"
            inputs[#inputs + 1] = { name = inp.name, datatype = dt, shape = inp.sparse and { -1, -1 } or { -1 },
                                    parameters = { optional = true, sparse = inp.sparse and true or false,
                                                   accepts = T.DT_WANT[inp.dtype],
                                                   ragged_by = inp.name .. "_indptr" } }
        end
        params = { input_encoding = "one tensor per input of the model's column description: shape [rows] "
            .. "(one value a row), [rows, k] (k values a row: a sparse input), or ragged: the values 1-D and an "
            .. "input NAME_indptr (INT64 or INT32 [rows + 1]) with each row's range (an empty range is missing: "
            .. "the input's default); an input left out is missing in every row" }
    else
        inputs = {
            { name = "indptr", datatype = "INT64", shape = { -1 },
              parameters = { accepts = "INT64 (or INT32)", description = "[rows + 1] row offsets into indices, from 0 to nnz" } },
            { name = "indices", datatype = "INT32", shape = { -1 },
              parameters = { accepts = "INT32 (or INT64)", description = "[nnz] 0-based feature ids; ids at or beyond the model's features are ignored" } },
            { name = "values", datatype = "FP32", shape = { -1 },
              parameters = { optional = true, description = "[nnz] one value per index; left out, every feature is binary (1)" } },
        }
        params = { input_encoding = "CSR rows: indptr [rows + 1], indices [nnz], values [nnz] (optional)" }
    end
    params.features = e.info and e.info.num_features or nil
    e.v2_meta = { inputs = inputs, outputs = outputs, params = params }
    return e.v2_meta
end

local function model_metadata(name, e, asked)
    local tm = tensors_meta(e)
    local vers = {}
    for _, v in ipairs(versions_of(name) or {}) do
        if v.state == "READY" or v.state == nil then vers[#vers + 1] = tostring(v.version) end
    end
    local p = {}
    for k, v in pairs(tm.params) do p[k] = v end
    p.version = version_name(e, asked)
    p.version_id = e.version_id or (not MD.resolve and e.version) or nil
    p.device = e.session and e.session:last_device() or e.device
    p.warmup_ms = e.warmup_ms
    p.columns = e.tr and true or false
    return { name = name, versions = vers, platform = "wisp", inputs = tm.inputs, outputs = tm.outputs, parameters = p }
end

local function all_ready()
    if #model_names == 0 then return false end
    for _, name in ipairs(model_names) do
        local ok = false
        for _, v in ipairs(versions_of(name) or {}) do if v.state == "READY" then ok = true; break end end
        if not ok then return false end
    end
    return true
end

-- the label of wisp_requests_total for a v2 endpoint, memoised
local req_labels = {}          -- name -> endpoint -> status -> label (no string made a request)
local function count(name, endpoint, status)
    local byn = req_labels[name]
    if not byn then byn = {}; req_labels[name] = byn end
    local bye = byn[endpoint]
    if not bye then bye = {}; byn[endpoint] = bye end
    local l = bye[status]
    if not l then
        l = lbl(name, fmt('endpoint="v2_%s",code="%d"', endpoint, status))
        bye[status] = l
    end
    inc("wisp_requests_total", l)
    return status
end

local read_body = H.read_body      -- read_body(true): in place when nginx can

local NAN = 0 / 0
local function by_index(a, b) return a.index < b.index end
local f32arr, i64arr = ffi.typeof("float[?]"), ffi.typeof("int64_t[?]")
local bin_f, bin_f_cap = nil, 0

-- the answer of a scored request: JSON, or the binary tensor data extension
-- the answer's constant parts, made once: the head by model and version name, the parameters
-- by device when no row is bad, the outputs when the request names none (no tables, no cjson
-- call a request: the v2 answer costs what v1's does)
local head_memo, params_memo = {}, {}
local OUTS_JSON = { { name = "probability", binary = false }, { name = "bad_rows", binary = false } }
local OUTS_BIN = { { name = "probability", binary = true }, { name = "bad_rows", binary = true } }
local NO_BAD = {}
local function head_of(name, ver)
    local byv = head_memo[name]
    if not byv then byv = {}; head_memo[name] = byv end
    local h = byv[ver]
    if not h then
        local cj = S.cjson
        h = '{"model_name":' .. cj.encode(name) .. ',"model_version":' .. cj.encode(ver)
        byv[ver] = h
    end
    return h
end
local function params_of(device)
    local k = device or false
    local t = params_memo[k]
    if not t then t = S.cjson.encode { device = device }; params_memo[k] = t end
    return t
end

local function answer(sink, req, name, ver, e, n, out, errs, bad, device)
    local want = req.outputs
    local outs
    if want then
        outs = {}
        for _, o in ipairs(want) do            -- (names checked by infer_entry)
            local bin = o.binary
            if bin == nil then bin = req.binary_output end
            outs[#outs + 1] = { name = o.name, binary = bin }
        end
    else
        outs = req.binary_output and OUTS_BIN or OUTS_JSON
    end
    local badlist = NO_BAD
    if bad then
        badlist = {}
        for i = 0, n - 1 do if bad[i] then badlist[#badlist + 1] = i end end
    end
    local cj = S.cjson
    local params_json
    if errs and #errs > 0 then
        sort(errs, by_index)
        for _, er in ipairs(errs) do er.error = A.utf8_clean(tostring(er.error)); er.line = nil end
        params_json = cj.encode { device = device, bad_row_reasons = cj.encode(errs) }
    else
        params_json = params_of(device)
    end
    local parts = { head_of(name, ver) }
    if req.id then parts[#parts + 1] = ',"id":'; parts[#parts + 1] = cj.encode(A.utf8_clean(req.id)) end
    parts[#parts + 1] = ',"parameters":'
    parts[#parts + 1] = params_json
    parts[#parts + 1] = ',"outputs":['
    local bins = {}
    for k, o in ipairs(outs) do
        if k > 1 then parts[#parts + 1] = "," end
        if o.name == "probability" then
            parts[#parts + 1] = fmt('{"name":"probability","datatype":"FP32","shape":[%d]', n)
            if o.binary then
                if n > bin_f_cap then bin_f_cap = n > 2 * bin_f_cap and n or 2 * bin_f_cap; bin_f = f32arr(bin_f_cap) end
                ffi.copy(bin_f, out, 4 * n)
                if bad then for i = 0, n - 1 do if bad[i] then bin_f[i] = NAN end end end
                bins[#bins + 1] = ffi.string(bin_f, 4 * n)
                parts[#parts + 1] = fmt(',"parameters":{"binary_data_size":%d}}', 4 * n)
            else
                parts[#parts + 1] = ',"data":['
                parts[#parts + 1] = A.float_items(out, n, bad)
                parts[#parts + 1] = "]}"
            end
        else
            local k2 = #badlist
            parts[#parts + 1] = fmt('{"name":"bad_rows","datatype":"INT64","shape":[%d]', k2)
            if o.binary then
                local a = i64arr(k2 > 0 and k2 or 1)
                for i = 1, k2 do a[i - 1] = badlist[i] end
                bins[#bins + 1] = ffi.string(a, 8 * k2)
                parts[#parts + 1] = fmt(',"parameters":{"binary_data_size":%d}}', 8 * k2)
            else
                parts[#parts + 1] = ',"data":[' .. concat(badlist, ",") .. "]}"
            end
        end
    end
    parts[#parts + 1] = "]}"
    local head = concat(parts)
    if #bins == 0 then return sink.send(200, head .. "\n") end
    return sink.send(200, head .. concat(bins), "application/octet-stream", #head)
end

-- the worker's sink: the answer sent (with the binary extension's header length), the counts made
local worker_sink = {
    send = function(status, text, ctype, hlen)
        if hlen then ngx.header["Inference-Header-Content-Length"] = hlen end
        return send(status, text, ctype)
    end,
    fail = fail,
    inc = inc,
}

-- a thread VM's sink (wisp.nginx.thread "infer"): the answer and the counts kept, for the worker
function M.thread_sink()
    local k = { counts = {} }
    k.send = function(status, text, ctype, hlen)
        k.status, k.text, k.ctype, k.hlen = status, text, ctype, hlen
        return status
    end
    k.fail = function(status, msg, extra)
        local t = { error = msg }
        if extra then for key, v in pairs(extra) do t[key] = v end end
        return k.send(status, S.cjson.encode(A.clean_strings(t, 0)) .. "\n")
    end
    k.inc = function(metric, labels, v)
        k.counts[#k.counts + 1] = metric .. "\t" .. labels .. "\t" .. tostring(v or 1)
    end
    return k
end

-- one row of the batch b as the batcher takes it: predict.lua's rule, shared
local batcher_row = P.batcher_row

local one_f32 = ffi.new("float[1]")

-- run_infer(sink, e, name, ver, body, blen, hlen_text, mode, max_rows) -> the status answered:
-- infer on the entry e it holds (decode, rows, score, answer), in the worker (mode inline,
-- async, auto) or in a thread VM (mode "inline" there); metrics and the answer through sink.
-- -> status, rows, the session that scored (for its stages), path ("direct" | "batcher")
local function run_infer(sink, e, name, ver, body, blen, hlen_text, mode, max_rows)
    local fail, inc = sink.fail, sink.inc
    local req, st, msg = T.decode(body, blen, hlen_text)
    if not req then
        inc("wisp_errors_total", 'kind="bad_request"')
        return fail(st, msg)
    end
    if req.outputs then
        for _, o in ipairs(req.outputs) do
            if o.name ~= "probability" and o.name ~= "bad_rows" then
                inc("wisp_errors_total", 'kind="bad_request"')
                return fail(400, fmt("unknown output '%s' (model '%s' has the outputs probability and bad_rows)", o.name, name))
            end
        end
    end
    local n, errs, bad, extra
    local out, err
    local s = e.session
    local b
    local path = "direct"
    if e.tr then
        n, errs, bad, extra = T.build_raw(req, e, max_rows)
        if not n then
            inc("wisp_errors_total", errs == 413 and 'kind="too_many_rows"' or 'kind="bad_request"')
            return fail(errs, bad, extra)
        end
        if n == 1 and e.batcher and not (bad and bad[0]) then
            -- one row for the batcher, which takes feature ids: transformed here (v1's rule)
            b = P.get_batch(e)
            local ok, terr = e.tr:transform(b)
            if not ok then P.put_batch(e, b); return fail(500, tostring(terr)) end
            if b:bad_count() > 0 then
                errs, bad = {}, {}
                for _, br in ipairs(b:bad_rows()) do errs[#errs + 1] = { index = br.row, error = br.msg }; bad[br.row] = true end
            end
        end
        if b and not (bad and bad[0]) then
            path = "batcher"
        elseif b then
            out, errs, bad = require("wisp.nginx.score").score(e, b, "v2", n, errs, bad, false)
            if not out then err = errs end
        elseif mode == "async" then
            b = P.get_batch(e)
            local ok, terr = e.tr:transform(b)
            if not ok then P.put_batch(e, b); return fail(500, tostring(terr)) end
            if b:bad_count() > 0 then
                errs, bad = {}, {}
                for _, br in ipairs(b:bad_rows()) do errs[#errs + 1] = { index = br.row, error = br.msg }; bad[br.row] = true end
            end
            out, err = P.score_async(e, b, MD.float_buf(n))
        else
            local added
            out, errs, bad, added = require("wisp.nginx.score").score(e, nil, "v2", n, errs, bad, true)
            if not out then err = errs end
        end
    else
        b = P.get_batch(e)
        n, errs, bad, extra = T.build_ids(req, e, b, max_rows)
        if not n then
            P.put_batch(e, b)
            inc("wisp_errors_total", errs == 413 and 'kind="too_many_rows"' or 'kind="bad_request"')
            return fail(errs, bad, extra)
        end
        if n == 1 and e.batcher and not (bad and bad[0]) then
            path = "batcher"
        elseif mode == "async" then
            out, err = P.score_async(e, b, MD.float_buf(n))
        else
            out, errs, bad = require("wisp.nginx.score").score(e, b, "v2", n, errs, bad, false)
            if not out then err = errs end
        end
    end
    if path == "batcher" then
        -- one row: coalesced with the other single-row requests of this worker (v1's too)
        local ids, vals, bids = batcher_row(b)
        local p, berr = e.batcher:score(ids, vals, bids)
        if p == nil then
            P.put_batch(e, b)
            if tostring(berr):find("queue full", 1, true) then
                inc("wisp_batcher_rejected_total", lbl(name))
                return fail(503, tostring(berr))
            end
            inc("wisp_errors_total", 'kind="score"')
            return fail(500, "score: " .. tostring(berr))
        end
        one_f32[0] = p
        out, s = one_f32, e.bsession
    end
    if not out then
        if b then P.put_batch(e, b) end
        inc("wisp_errors_total", 'kind="score"')
        return fail(500, "score: " .. tostring(err))
    end
    -- every row that is not a probability is a bad row with its reason (v1's invariant)
    bad, errs = A.mark_unscored(n, out, bad, errs)
    local nbad = errs and #errs or 0
    inc("wisp_rows_total", lbl(name), n)
    if nbad > 0 then inc("wisp_row_errors_total", lbl(name), nbad) end
    local device = s:last_device()
    local status
    if nbad >= n then
        sort(errs, by_index)
        local why = {}
        for i = 1, #errs < 10 and #errs or 10 do why[i] = fmt("row %d: %s", errs[i].index, tostring(errs[i].error)) end
        inc("wisp_errors_total", 'kind="all_rows_bad"')
        status = fail(400, "no row could be scored: " .. concat(why, "; ") .. (#errs > 10 and "; ..." or ""))
    else
        status = answer(sink, req, name, ver, e, n, out, errs, bad, device)
    end
    if b then P.put_batch(e, b) end
    return status, n, s, path
end
M.run_infer = run_infer

-- the thread pool's answer (wisp.nginx.thread "infer") replayed in the worker: its counts
-- made, its rows observed as v1's thread path observes them, the answer sent
local function thread_answered(name, status, text, ctype, hlen, counts, n, kns, tns)
    if counts ~= "" then
        for line in counts:gmatch("[^\n]+") do
            local metric, labels, v = line:match("^([^\t]+)\t([^\t]*)\t([^\t]+)$")
            if metric then inc(metric, labels, tonumber(v)) end
        end
    end
    if n and n > 0 then
        MT.observe("wisp_batch_rows", lbl(name, 'path="thread"'), n)
        MT.observe("wisp_stage_seconds", lbl(name, 'stage="kernel"'), kns / 1e9)
        MT.observe("wisp_stage_seconds", lbl(name, 'stage="total"'), tns / 1e9)
    end
    return worker_sink.send(status, text, ctype ~= "" and ctype or nil, hlen > 0 and hlen or nil)
end

-- infer on the entry e it holds, placed as v1's predict places a request (-> the status sent)
local function infer_entry(e, name, ver, body, blen)
    local cfg = S.cfg
    local max_rows = cfg.max_rows_per_request
    local hlen_text = ngx.var.http_inference_header_content_length
    local mode = cfg.mode
    if (mode == "thread" or (mode == "auto" and blen >= cfg.thread_min_bytes)) and type(hlen_text) ~= "table" then
        local text_body = type(body) == "string" and body or ffi.string(body, blen)
        local thread_sema = S.thread_sema
        local got, werr = thread_sema:wait(10)
        if not got then
            inc("wisp_errors_total", 'kind="thread_busy"')
            return fail(503, "worker threads busy: " .. tostring(werr))
        end
        local ok, status, text, ctype, hlen, counts, n, kns, tns = ngx.run_worker_thread(cfg.thread_pool,
            "wisp.nginx.thread", "infer", name, ver, e.path, e.stamp, e.checksum, e.device_asked, text_body,
            hlen_text, max_rows)
        thread_sema:post(1)
        if ok and status ~= 0 then
            return thread_answered(name, status, text, ctype, hlen, counts, n, kns, tns)
        elseif ok then
            -- the thread's VM could not map this exact version (predict.lua's rule): inline,
            -- with the entry this worker holds
            inc("wisp_errors_total", 'kind="thread_stale"')
            mode = "inline"
        elseif not (cfg.mode_by_device and tostring(status):find("not found", 1, true)) then
            inc("wisp_errors_total", 'kind="thread"')
            return fail(500, "worker thread: " .. tostring(status))
        else
            -- the device's default mode without a thread pool in nginx.conf: v1's predict says
            -- so and scores inline from then on; v2 follows
            cfg.mode, mode = "inline", "inline"
        end
    end
    return (run_infer(worker_sink, e, name, ver, body, blen, hlen_text, mode, max_rows))
end

local function infer(name, version, method)
    if method ~= "POST" then return method_not_allowed("POST") end
    local enc = ngx.var.http_content_encoding
    if enc and enc ~= "" and enc:lower() ~= "identity" then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "Content-Encoding " .. enc .. " is not supported (send the body uncompressed)")
    end
    local e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    local body, blen = read_body(true)
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body (an inference request {\"inputs\": [...]} expected)")
    end
    -- the version that answers: resolved again now that the body is here (reading it yields),
    -- held until the answer is made
    e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    local ver = version_name(e, version)
    e.inflight = e.inflight + 1
    local ok, status = pcall(infer_entry, e, name, ver, body, blen)
    e:release()
    if not ok then
        inc("wisp_errors_total", 'kind="internal"')
        return fail(500, "internal error: " .. tostring(status))
    end
    return status
end

local function get_only(method) return method == "GET" or method == "HEAD" end

local function repository(uri, method, closed)
    if closed then
        inc("wisp_errors_total", 'kind="admin_only"')
        return fail(403, "the model repository extension is served on the admin listener only (configure{admin = \"separate\"}: "
            .. "the server block whose handler is handle(true), serve.sh --admin-port)")
    end
    if method ~= "POST" then return method_not_allowed("POST") end
    if uri == "/v2/repository/index" then
        if not MD.repository_index then return fail(501, "the model repository extension is not available in this build") end
        local ready_only = false
        local body, blen = read_body(true)
        if body ~= nil and blen > 0 then
            local text = type(body) == "string" and body or ffi.string(body, blen)
            if text:find("%S") then
                local doc = S.cjson.decode(text)
                if type(doc) ~= "table" or not T.is_object(doc) then return fail(400, 'a JSON object {"ready": true|false} expected') end
                if doc.ready ~= nil and type(doc.ready) ~= "boolean" then return fail(400, '"ready": true or false expected') end
                ready_only = doc.ready == true
            end
        end
        local list = MD.repository_index(ready_only)
        local out = {}
        for i, m in ipairs(list or {}) do
            out[i] = { name = m.name, version = m.version and tostring(m.version) or nil, state = m.state, reason = m.reason }
        end
        return send(200, (#out == 0 and "[]" or S.cjson.encode(A.clean_strings(out, 0))) .. "\n")
    end
    local name, verb = uri:match("^/v2/repository/models/([^/]+)/(%a+)$")
    if not name or (verb ~= "load" and verb ~= "unload") then
        return fail(404, "no such endpoint: " .. uri:sub(1, 200))
    end
    local fn = verb == "load" and MD.repository_load or MD.repository_unload
    if not fn then return fail(501, "the model repository extension is not available in this build") end
    local ok, st, msg = fn(name)
    if ok then return send_json(200, { name = name, [verb] = true }) end     -- KServe's answer: {"name", "load": true}
    return fail(st or 500, msg or (verb .. " failed"))
end

-- handle(uri, method, closed) -> status: every /v2 route. closed: the admin endpoints are not
-- served on this listener (configure{admin = "separate"} and not the admin server).
function M.handle(uri, method, closed)
    if uri == "/v2" or uri == "/v2/" then
        if not get_only(method) then return method_not_allowed("GET, HEAD") end
        local ext = { "binary_tensor_data", "parameters" }
        if MD.repository_index then ext[#ext + 1] = "model_repository" end
        return send_json(200, { name = "wisp", version = (S.wisp and S.wisp._VERSION) or "unknown", extensions = ext })
    elseif uri == "/v2/health/live" then
        if not get_only(method) then return method_not_allowed("GET, HEAD") end
        return send_json(200, { live = true })
    elseif uri == "/v2/health/ready" then
        if not get_only(method) then return method_not_allowed("GET, HEAD") end
        -- not ready: 503 with an "error", as KServe's reference server (and v1's /readyz) answer
        -- (the protocol's text says "4xx"; Triton answers 400; every client and probe reads "not 200")
        if all_ready() then return send_json(200, { ready = true }) end
        return send_json(503, { ready = false, error = "not every model has a version ready (GET /readyz says which)" })
    end
    if uri:sub(1, 15) == "/v2/repository/" then return repository(uri, method, closed) end
    local rest = uri:match("^/v2/models/(.+)$")
    if not rest then
        inc("wisp_errors_total", 'kind="not_found"')
        return fail(404, "no such endpoint: " .. (#uri > 200 and uri:sub(1, 200) .. "..." or uri))
    end
    local name, version, verb
    name, version, verb = rest:match("^([^/]+)/versions/([^/]+)/?(%a*)$")
    if not name then
        version = nil
        name, verb = rest:match("^([^/]+)/?(%a*)$")
    end
    if not name or (verb ~= "" and verb ~= "ready" and verb ~= "infer") then
        inc("wisp_errors_total", 'kind="not_found"')
        return fail(404, "no such endpoint: " .. (#uri > 200 and uri:sub(1, 200) .. "..." or uri))
    end
    local known = models[name] ~= nil or (MD.versions and (MD.versions(name) or {})[1] ~= nil)
    if not known then
        inc("wisp_errors_total", 'kind="unknown_model"')
        return count(name == "" and "?" or "?", verb == "" and "meta" or verb,
                     fail(404, fmt("unknown model '%s'", #name > 100 and name:sub(1, 100) .. "..." or name)))
    end
    if verb == "infer" then
        return count(name, "infer", infer(name, version, method) or 0)
    end
    if not get_only(method) then return method_not_allowed("GET, HEAD") end
    local e, st, msg = resolve(name, version)
    if verb == "ready" then
        if e then return count(name, "ready", send_json(200, { name = name, ready = true })) end
        if st == 404 then return count(name, "ready", fail(404, msg)) end
        return count(name, "ready", send_json(503, { name = name, ready = false, error = msg }))
    end
    if not e then return count(name, "meta", fail(st, msg)) end
    return count(name, "meta", send_json(200, model_metadata(name, e, version)))
end

return M
