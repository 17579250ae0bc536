-- wisp/nginx/v2/routes.lua — v2, the Open Inference Protocol of KServe and Triton, over HTTP/REST: its
-- routes (/v2, health, model metadata and readiness, infer (wisp.nginx.v2.infer), the model
-- repository extension) and the metadata answers (inputs and outputs with datatypes and shapes,
-- platform "wisp"). The versions a model serves are wisp.nginx.models' (the model repository and
-- its version policy, or a model file's one version "1").
--
-- Bad rows: the protocol has no per-row errors. A row wisp cannot score (a negative index, a
-- value that is not a finite float32, a string where a number is expected, ...) scores NaN
-- (null in a JSON output), its 0-based index is in the output "bad_rows" (INT64 [k]), and the
-- response parameter "bad_row_reasons" is a JSON text of the list [{"index": i, "error": "..."}]
-- (v1's "bad_rows" entries); the other rows are scored. When no row can be scored: 400, as v1.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local J = require "wisp.nginx.json"
local ROWS = require "wisp.nginx.v2.rows"
local IN = require "wisp.nginx.v2.infer"

local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs
local fmt = string.format
local send, send_json, fail, method_not_allowed, read_body = H.send, H.send_json, H.fail, H.method_not_allowed,
    H.read_body
local inc, count = MT.inc, MT.count_request
local resolve, versions, infer = MD.resolve, MD.versions, IN.infer
local is_object, clean_strings = J.is_object, J.clean_strings
local models, model_names = S.models, S.model_names

local M = {}

-- the tensor metadata of a model (cached on the entry)
local function tensors_meta(e)
    if e.v2_meta then return e.v2_meta end
    local inputs, params
    local outputs = {
        { name = "probability", datatype = "FP32", shape = { -1 } },
        { name = "bad_rows", datatype = "INT64", shape = { -1 },
          parameters = { description = "0-based indices of the rows that could not be scored (their probability is "
              .. "NaN)" } },
    }
    if e.tr then
        inputs = {}
        for _, inp in ipairs(e.inputs) do
            local dt = inp.dtype == "string" and "BYTES" or inp.dtype == "int64" and "INT64" or "FP32"
            inputs[#inputs + 1] = { name = inp.name, datatype = dt, shape = inp.sparse and { -1, -1 } or { -1 },
                                    parameters = { optional = true, sparse = inp.sparse and true or false,
                                                   accepts = ROWS.DT_WANT[inp.dtype],
                                                   ragged_by = inp.name .. "_indptr" } }
        end
        params = { input_encoding = "one tensor per input of the model's column description: shape [rows] "
            .. "(one value a row), [rows, k] (k values a row: a sparse input), or ragged: the values 1-D and an "
            .. "input NAME_indptr (INT64 or INT32 [rows + 1]) with each row's range (an empty range is missing: "
            .. "the input's default); an input left out is missing in every row" }
    else
        inputs = {
            { name = "indptr", datatype = "INT64", shape = { -1 },
              parameters = { accepts = "INT64 (or INT32)",
                  description = "[rows + 1] row offsets into indices, from 0 to nnz" } },
            { name = "indices", datatype = "INT32", shape = { -1 },
              parameters = { accepts = "INT32 (or INT64)",
                  description = "[nnz] 0-based feature ids; ids at or beyond the model's features are ignored" } },
            { name = "values", datatype = "FP32", shape = { -1 },
              parameters = { optional = true,
                  description = "[nnz] one value per index; left out, every feature is binary (1)" } },
        }
        params = { input_encoding = "CSR rows: indptr [rows + 1], indices [nnz], values [nnz] (optional)" }
    end
    params.features = e.info and e.info.num_features or nil
    e.v2_meta = { inputs = inputs, outputs = outputs, params = params }
    return e.v2_meta
end

local function model_metadata(name, e)
    local tm = tensors_meta(e)
    local vers = {}
    for _, v in ipairs(versions(name) or {}) do
        if v.state == "READY" or v.state == nil then vers[#vers + 1] = tostring(v.version) end
    end
    local p = {}
    for k, v in pairs(tm.params) do p[k] = v end
    p.version = e.version
    p.version_id = e.version_id
    p.device = e.session and e.session:last_device() or e.device
    p.warmup_ms = e.warmup_ms
    p.columns = e.tr and true or false
    return { name = name, versions = vers, platform = "wisp", inputs = tm.inputs, outputs = tm.outputs, parameters = p }
end


local function all_ready()
    if #model_names == 0 then return false end
    for _, name in ipairs(model_names) do
        local ok = false
        for _, v in ipairs(versions(name) or {}) do if v.state == "READY" then ok = true; break end end
        if not ok then return false end
    end
    return true
end

local function get_only(method) return method == "GET" or method == "HEAD" end

local function repository(uri, method, closed, admin_only)
    if closed then return admin_only("the model repository extension") end
    if method ~= "POST" then return method_not_allowed("POST") end
    if uri == "/v2/repository/index" then
        local ready_only = false
        local body, blen = read_body(true)
        if body ~= nil and blen > 0 then
            local text = type(body) == "string" and body or ffi.string(body, blen)
            if text:find("%S") then
                local doc = S.cjson.decode(text)
                if not is_object(doc) then return fail(400, 'a JSON object {"ready": true|false} expected') end
                if doc.ready ~= nil and type(doc.ready) ~= "boolean" then return fail(400,
                    '"ready": true or false expected') end
                ready_only = doc.ready == true
            end
        end
        local list = MD.repository_index(ready_only)
        local out = {}
        for i, m in ipairs(list or {}) do
            out[i] = { name = m.name, version = m.version and tostring(m.version) or nil, state = m.state,
                reason = m.reason }
        end
        return send(200, (#out == 0 and "[]" or S.cjson.encode(clean_strings(out, 0))) .. "\n")
    end
    local name, verb = uri:match("^/v2/repository/models/([^/]+)/(%a+)$")
    if not name or (verb ~= "load" and verb ~= "unload") then
        return fail(404, "no such endpoint: " .. uri:sub(1, 200))
    end
    local fn = verb == "load" and MD.repository_load or MD.repository_unload
    local ok, st, msg = fn(name)
    if ok then return send_json(200, { name = name, [verb] = true }) end     -- KServe's answer: {"name", "load": true}
    return fail(st or 500, msg or (verb .. " failed"))
end

-- handle(uri, method, closed, admin_only) -> status: every /v2 route. closed: the admin endpoints
-- are not served on this listener (configure{admin = "separate"} and not the admin server);
-- admin_only(what) answers them.
function M.handle(uri, method, closed, admin_only)
    if uri == "/v2" or uri == "/v2/" then
        if not get_only(method) then return method_not_allowed("GET, HEAD") end
        local ext = { "binary_tensor_data", "parameters", "model_repository" }
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
    if uri:sub(1, 15) == "/v2/repository/" then return repository(uri, method, closed, admin_only) end
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
    local known = models[name] ~= nil
    if not known then
        inc("wisp_errors_total", 'kind="unknown_model"')
        return count("?", verb == "" and "v2_meta" or "v2_" .. verb,
                     fail(404, fmt("unknown model '%s'", #name > 100 and name:sub(1, 100) .. "..." or name)))
    end
    if verb == "infer" then
        return count(name, "v2_infer", infer(name, version, method) or 0)
    end
    if not get_only(method) then return method_not_allowed("GET, HEAD") end
    local e, st, msg = resolve(name, version)
    if verb == "ready" then
        if e then return count(name, "v2_ready", send_json(200, { name = name, ready = true })) end
        if st == 404 then return count(name, "v2_ready", fail(404, msg)) end
        return count(name, "v2_ready", send_json(503, { name = name, ready = false, error = msg }))
    end
    if not e then return count(name, "v2_meta", fail(st, msg)) end
    return count(name, "v2_meta", send_json(200, model_metadata(name, e)))
end

return M
