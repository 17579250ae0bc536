-- wisp/nginx/http.lua — the HTTP edge of the service: a request's body read in place from nginx's
-- memory, and answers sent with their length (errors as JSON {"error": ...}).

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local J = require "wisp.nginx.json"

local type, tonumber, pairs, pcall = type, tonumber, pairs, pcall
local clean_strings = J.clean_strings

local M = {}

-- body_ptr() -> pointer, length of the request body in nginx's memory, or nil (no body, or
-- it is in a temporary file): the $request_body variable read through lua-resty-core's FFI
-- call (ngx.var would make it a Lua string). For one body buffer nginx hands out that
-- buffer itself, which lives until the request ends. Set in init_worker; nil without
-- resty.core (then the body is read with ngx.req.get_body_data).
M.body_ptr = nil
function M.init_body_ptr()
    local ok, base = pcall(require, "resty.core.base")
    if not ok or type(base) ~= "table" or not base.get_request then return end
    local fn
    ok = pcall(function() require "resty.core.var"; fn = ffi.C.ngx_http_lua_ffi_var_get end)
    if not ok or not fn then return end
    local get_request = base.get_request
    local vp, lp, ep = ffi.new("unsigned char *[1]"), ffi.new("size_t[1]"), ffi.new("char *[1]")
    local lower = ffi.new("char[16]")
    M.body_ptr = function()
        local r = get_request()
        if r == nil then return nil end
        if fn(r, "request_body", 12, lower, 0, vp, lp, ep) ~= 0 then return nil end
        local n = tonumber(lp[0])
        if n == 0 then return nil end
        return vp[0], n
    end
end

-- The answer, with its length: no chunked encoding, and an answer over postpone_output
-- (1460 bytes) leaves in one writev (chunked, its last chunk would take a second one).
local function send(status, body, ctype)
    ngx.status = status
    local h = ngx.header
    h["Content-Type"] = ctype or "application/json"
    h["Content-Length"] = #body
    ngx.print(body)
    return status
end

local function send_json(status, t)
    return send(status, S.cjson.encode(clean_strings(t, 0)) .. "\n")
end

-- the JSON text of an error answer {"error": msg, ...extra} (no ngx: a thread VM makes its errors too)
local function error_body(msg, extra)
    local t = { error = msg }
    if extra then for k, v in pairs(extra) do t[k] = v end end
    return S.cjson.encode(clean_strings(t, 0)) .. "\n"
end

local function fail(status, msg, extra)
    return send(status, error_body(msg, extra))
end

local function method_not_allowed(allow)
    ngx.header["Allow"] = allow
    return fail(405, "method " .. ngx.req.get_method() .. " not allowed here (use " .. allow .. ")")
end

-- A request body sent compressed (Content-Encoding other than identity) refused with 415: -> the
-- status sent, or nil when the body is plain
function M.refuse_encoding(inc)
    local enc = ngx.var.http_content_encoding
    if enc and enc ~= "" and enc:lower() ~= "identity" then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "Content-Encoding " .. enc .. " is not supported (send the body uncompressed)")
    end
    return nil
end

M.send = send
M.send_json = send_json
M.fail = fail
M.method_not_allowed = method_not_allowed
M.error_body = error_body

-- read_body(in_place) -> body, length: the request body (read first), as a pointer into
-- nginx's buffer when in_place and body_ptr can give one (no Lua string), else as a Lua
-- string (also a body nginx spooled to a temporary file); nil, 0 when there is none.
function M.read_body(in_place)
    ngx.req.read_body()
    local body, blen
    if in_place and M.body_ptr then body, blen = M.body_ptr() end
    if body == nil then
        body = ngx.req.get_body_data()
        if not body then
            local file = ngx.req.get_body_file()
            if file then
                local f = io.open(file, "rb")
                if f then body = f:read("*a"); f:close() end
            end
        end
        blen = body and #body or 0
    end
    return body, blen
end

return M
