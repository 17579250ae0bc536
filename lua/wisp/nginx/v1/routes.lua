-- wisp/nginx/v1/routes.lua — v1's endpoints (TensorFlow Serving's REST shape): GET /v1/models,
-- GET /v1/models/NAME (a model's metadata), POST /v1/models/NAME:predict (wisp.nginx.v1.predict) and
-- POST /v1/models/NAME:reload.

local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local PR = require "wisp.nginx.v1.predict"

local tostring, ipairs = tostring, ipairs
local send_json, fail, method_not_allowed = H.send_json, H.fail, H.method_not_allowed
local inc, count_request = MT.inc, MT.count_request
local reload_slot, predict = MD.reload_slot, PR.predict
local models, model_names = S.models, S.model_names

local M = {}

local function model_meta(slot)
    local cfg = S.cfg
    local e = slot.cur
    local t = { name = slot.name, path = slot.path, ready = e ~= nil, mode = cfg.mode,
                mode_chosen_by = cfg.mode_by_device and "device" or "configuration",
                device = { requested = slot.device } }
    local r = { loads = slot.loads or 0, failures = slot.failures or 0, check_interval_s = cfg.reload_check_s }
    if slot.reload_error then r.error = slot.reload_error.error; r.error_at = slot.reload_error.at end
    t.reload = r
    -- the file at the path against the version serving: "serving" when they are the same
    -- file, else what is wrong with it (changed in place, failed to load, missing)
    t.file = slot.file_state or (e and { state = "serving", serving = e.version }) or { state = "not loaded" }
    if e then
        t.version = { id = e.version, checksum = e.checksum, mtime = e.file.mtime, size = e.file.size,
                      inode = e.file.inode, loaded_at = e.loaded_at }
        t.features = e.info.num_features
        t.dtype = e.info.dtype
        t.bias = e.info.bias
        t.meta = e.info.meta
        t.device.in_use = e.session and e.session:last_device() or e.device
        t.device.gpu_status = S.engine:gpu_status()
        t.batching = e.batcher and e.batcher:policy() or false
        if e.spec then
            t.input = "json rows or JSON lines (application/x-ndjson) of raw features (the columns' inputs), or "
                .. "libsvm lines of feature ids"
            t.inputs = e.inputs
            t.columns = e.slices
        else
            t.input = 'json rows {"ids": [...], "vals": [...]}, or libsvm lines of feature ids'
            t.columns = S.cjson.empty_array
        end
    end
    return t
end
M.model_meta = model_meta

-- a verb's endpoint label (wisp_requests_total), made once; an unknown verb is counted without its ":"
local ENDPOINT = { [""] = "meta", [":predict"] = "predict", [":reload"] = "reload" }

-- uri -> {name, verb} of /v1/models/NAME[:VERB], memoised (bounded: a client sends a few)
local route_memo, route_memo_n = {}, 0

-- handle(uri, method, closed, admin_only) -> status, or nil when uri is no v1 model route.
-- closed: the admin verbs are not served on this listener; admin_only(what) answers them.
function M.handle(uri, method, closed, admin_only)
    if uri == "/v1/models" or uri == "/v1/models/" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        local list = {}
        for _, name in ipairs(model_names) do list[#list + 1] = model_meta(models[name]) end
        return send_json(200, { models = list })
    end
    local name, verb
    local rt = route_memo[uri]
    if rt then
        name, verb = rt[1], rt[2]
    else
        name, verb = uri:match("^/v1/models/([^/:]+)(:?[%w_]*)$")
        if name and route_memo_n < 256 then route_memo[uri] = { name, verb }; route_memo_n = route_memo_n + 1 end
    end
    if not name then return nil end
    local slot = models[name]
    if not slot then
        inc("wisp_errors_total", 'kind="unknown_model"')
        return fail(404, "unknown model '" .. name .. "'", { models = model_names })
    end
    local status
    if verb == ":predict" then
        status = predict(slot, name, method)
    elseif verb == "" then
        if method ~= "GET" and method ~= "HEAD" then status = method_not_allowed("GET, HEAD")
        else status = send_json(200, model_meta(slot)) end
    elseif verb == ":reload" then
        if closed then status = admin_only("POST /v1/models/NAME:reload")
        elseif method ~= "POST" then status = method_not_allowed("POST")
        else
            local dict = ngx.shared[S.cfg.shm]
            local gen = dict and dict:incr("gen\t" .. name, 1, 0) or 0
            slot.gen = gen
            local ok, err = reload_slot(slot, true, "reload request")
            if ok and err == "unchanged" then
                status = send_json(200, { reloaded = false, unchanged = true, model = model_meta(slot) })
            elseif ok then
                status = send_json(200, { reloaded = true, model = model_meta(slot) })
            else
                status = fail(500, "reload failed; the loaded version keeps serving: " .. tostring(err),
                              { model = model_meta(slot) })
            end
        end
    else
        inc("wisp_errors_total", 'kind="not_found"')
        status = fail(404, "unknown verb '" .. verb .. "' (use :predict or :reload)")
    end
    return count_request(name, ENDPOINT[verb] or verb:sub(2), status or 0)
end

return M
