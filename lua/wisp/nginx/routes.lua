-- wisp/nginx/routes.lua — the service's endpoints: /v1/models[/NAME][:predict|:reload], /healthz,
-- /readyz, /metrics, the admin rule, and the metadata answers; /v2/... goes to wisp.nginx.v2.

local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local P = require "wisp.nginx.predict"
local V2 = require "wisp.nginx.v2"

local tostring, ipairs = tostring, ipairs
local fmt = string.format
local send, send_json, fail, method_not_allowed = H.send, H.send_json, H.fail, H.method_not_allowed
local inc, lbl = MT.inc, MT.lbl
local reload_slot, predict = MD.reload_slot, P.predict
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
            t.input = "json rows or JSON lines (application/x-ndjson) of raw features (the columns' inputs), or libsvm lines of feature ids"
            t.inputs = e.inputs
            t.columns = e.slices
        else
            t.input = 'json rows {"ids": [...], "vals": [...]}, or libsvm lines of feature ids'
            t.columns = S.cjson.empty_array
        end
    end
    return t
end

local function ready_status()
    local all = true
    local list = {}
    for _, name in ipairs(model_names) do
        local slot = models[name]
        local e = slot.cur
        local ok = e ~= nil and e.session ~= nil
        if not ok then all = false end
        list[name] = { ready = ok, device = e and e.device or nil,
                       error = (not ok and slot.reload_error) and slot.reload_error.error or nil,
                       -- still ready (a verified version serves), but the file is not it
                       warning = (ok and slot.file_state) and slot.file_state.state or nil,
                       serving = ok and e.version or nil }
    end
    return all and #model_names > 0, list
end

-- the label text of wisp_requests_total for (model, verb, status), memoised
local req_labels = {}
local function request_label(name, verb, status)
    local k = req_labels[name]
    if not k then k = {}; req_labels[name] = k end
    local byv = k[verb]
    if not byv then byv = {}; k[verb] = byv end
    local l = byv[status]
    if not l then
        l = lbl(name, fmt('endpoint="%s",code="%d"', verb == "" and "meta" or verb:sub(2), status))
        byv[status] = l
    end
    return l
end

-- uri -> {name, verb} of /v1/models/NAME[:VERB], memoised (bounded: a client sends a few)
local route_memo, route_memo_n = {}, 0

-- an admin endpoint asked for on a listener that does not serve them (admin = "separate")
local function admin_only(what)
    inc("wisp_errors_total", 'kind="admin_only"')
    return fail(403, what .. " is served on the admin listener only (configure{admin = \"separate\"}: "
        .. "the server block whose handler is handle(true), serve.sh --admin-port)")
end

-- content_by_lua: the whole service (routes above). admin: this listener serves the admin
-- endpoints (:reload, /metrics) also when configure{admin = "separate"}.
function M.handle(admin)
    local uri = ngx.var.uri
    local method = ngx.req.get_method()
    local cfg = S.cfg
    local closed = cfg.admin == "separate" and not admin
    if uri:sub(1, 3) == "/v2" and (#uri == 3 or uri:byte(4) == 47) then
        return V2.handle(uri, method, closed)           -- the Open Inference Protocol (wisp.nginx.v2)
    elseif uri == "/healthz" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        return send_json(200, { status = "ok", worker = ngx.worker.id(), pid = ngx.worker.pid() })
    elseif uri == "/readyz" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        local ok, list = ready_status()
        return send_json(ok and 200 or 503, { ready = ok, models = list })
    elseif uri == "/metrics" then
        if closed then return admin_only("/metrics") end
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        return send(200, MT.metrics_text(), "text/plain; version=0.0.4")
    elseif uri == "/v1/models" or uri == "/v1/models/" then
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
    if not name then
        inc("wisp_errors_total", 'kind="not_found"')
        return fail(404, "no such endpoint: " .. (#uri > 200 and uri:sub(1, 200) .. "..." or uri), { endpoints = { "POST /v1/models/NAME:predict",
            "GET /v1/models/NAME", "POST /v1/models/NAME:reload", "GET /healthz", "GET /readyz", "GET /metrics",
            "GET /v2", "GET /v2/health/live", "GET /v2/health/ready", "GET /v2/models/NAME[/versions/V][/ready]",
            "POST /v2/models/NAME[/versions/V]/infer" } })
    end
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
            local dict = ngx.shared[cfg.shm]
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
    inc("wisp_requests_total", request_label(name, verb, status or 0))
    return status
end

-- error_page 413 target (nginx refused a body over client_max_body_size): a JSON answer.
-- (nginx's other own errors answer JSON from examples/openresty/errors.conf, without Lua.)
function M.too_large()
    inc("wisp_errors_total", 'kind="body_too_large"')
    return fail(413, "request body too large (client_max_body_size)")
end

M.model_meta = model_meta
M.ready_status = ready_status

return M
