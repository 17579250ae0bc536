-- wisp/nginx/routes.lua — the service's endpoints: /v1/... (wisp.nginx.v1.routes), /v2/...
-- (wisp.nginx.v2.routes), /healthz, /readyz, /metrics, the admin rule, and nginx's 413 answered as JSON.

local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local V1 = require "wisp.nginx.v1.routes"
local V2 = require "wisp.nginx.v2.routes"

local ipairs = ipairs
local send, send_json, fail, method_not_allowed = H.send, H.send_json, H.fail, H.method_not_allowed
local inc = MT.inc
local models, model_names = S.models, S.model_names

local M = {}

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

-- an admin endpoint asked for on a listener that does not serve them (admin = "separate")
local function admin_only(what)
    inc("wisp_errors_total", 'kind="admin_only"')
    return fail(403, what .. " is served on the admin listener only (configure{admin = \"separate\"}: "
        .. "the server block whose handler is handle(true), serve.sh --admin-port)")
end

local ENDPOINTS = { "POST /v1/models/NAME:predict", "GET /v1/models/NAME", "POST /v1/models/NAME:reload",
                    "GET /healthz", "GET /readyz", "GET /metrics", "GET /v2", "GET /v2/health/live",
                    "GET /v2/health/ready", "GET /v2/models/NAME[/versions/V][/ready]",
                    "POST /v2/models/NAME[/versions/V]/infer" }

-- content_by_lua: the whole service. admin: this listener serves the admin endpoints (:reload,
-- /metrics, the v2 repository extension) also when configure{admin = "separate"}.
function M.handle(admin)
    local uri = ngx.var.uri
    local method = ngx.req.get_method()
    local closed = S.cfg.admin == "separate" and not admin
    if uri:sub(1, 3) == "/v2" and (#uri == 3 or uri:byte(4) == 47) then
        return V2.handle(uri, method, closed, admin_only)
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
    end
    local status = V1.handle(uri, method, closed, admin_only)
    if status then return status end
    inc("wisp_errors_total", 'kind="not_found"')
    return fail(404, "no such endpoint: " .. (#uri > 200 and uri:sub(1, 200) .. "..." or uri),
        { endpoints = ENDPOINTS })
end

-- error_page 413 target (nginx refused a body over client_max_body_size): a JSON answer.
-- (nginx's other own errors answer JSON from examples/openresty/errors.conf, without Lua.)
function M.too_large()
    inc("wisp_errors_total", 'kind="body_too_large"')
    return fail(413, "request body too large (client_max_body_size)")
end

M.ready_status = ready_status

return M
