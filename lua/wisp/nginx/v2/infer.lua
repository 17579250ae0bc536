-- wisp/nginx/v2/infer.lua — POST /v2/models/NAME[/versions/V]/infer: the request checked, its body read,
-- the version resolved and held, and v2 as a protocol of wisp.nginx.run: decode (wisp.nginx.v2.decode)
-- -> run (in the configured mode) -> encode (wisp.nginx.v2.encode).

local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"
local RUN = require "wisp.nginx.run"
local D = require "wisp.nginx.v2.decode"
local E = require "wisp.nginx.v2.encode"

local tostring, pcall = tostring, pcall
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
    local enc = ngx.var.http_content_encoding
    if enc and enc ~= "" and enc:lower() ~= "identity" then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "Content-Encoding " .. enc .. " is not supported (send the body uncompressed)")
    end
    local e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    local body, blen = H.read_body(true)
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body (an inference request {\"inputs\": [...]} expected)")
    end
    -- the version that answers: resolved again now that the body is here (reading it yields),
    -- held until the answer is made
    e, st, msg = resolve(name, version)
    if not e then return fail(st, msg) end
    e.inflight = e.inflight + 1
    local ok, status = pcall(RUN.request, P, e, body, blen, ngx.var.http_inference_header_content_length)
    e:release()
    if not ok then
        inc("wisp_errors_total", 'kind="internal"')
        return fail(500, "internal error: " .. tostring(status))
    end
    return status
end

return M
