-- wisp/nginx/v2/infer.lua — POST /v2/models/NAME[/versions/V]/infer: the request checked, its body read,
-- the version resolved and held, and v2 as a protocol of wisp.nginx.run: decode (wisp.nginx.v2.decode)
-- -> run (in the configured mode) -> encode (wisp.nginx.v2.encode).

local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local RUN = require "wisp.nginx.run"
local D = require "wisp.nginx.v2.decode"
local E = require "wisp.nginx.v2.encode"

local fail, method_not_allowed = H.fail, H.method_not_allowed
local inc = MT.inc
local resolve = MD.resolve

local M = {}

-- v2 for wisp.nginx.run: arg is the Inference-Header-Content-Length header's text (or nil)
M.protocol = { module = "wisp.nginx.v2.infer", decode = D.decode, encode = E.encode, finish = D.finish }
local P = M.protocol

-- infer(name, version or nil, method) -> the status sent
function M.infer(name, version, method)
    if method ~= "POST" then return method_not_allowed("POST") end
    local refused = H.refuse_encoding(inc)
    if refused then return refused end
    local e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    local body, blen = H.read_body(true)
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body (an inference request {\"inputs\": [...]} expected)")
    end
    -- the version that answers: resolved again now that the body is here (reading it yields)
    e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    return RUN.held(P, e, body, blen, ngx.var.http_inference_header_content_length)
end

return M
