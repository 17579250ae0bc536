-- wisp/nginx/v1/predict.lua — POST /v1/models/NAME:predict: the request checked (method, Content-Type,
-- Content-Encoding, a loaded version), its body read, the serving entry held, and v1 as a protocol of
-- wisp.nginx.run: decode (wisp.nginx.v1.decode) -> run (in the configured mode) -> encode
-- (wisp.nginx.v1.encode).

local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local RUN = require "wisp.nginx.run"
local D = require "wisp.nginx.v1.decode"
local E = require "wisp.nginx.v1.encode"

local fail, method_not_allowed = H.fail, H.method_not_allowed
local inc = MT.inc

local M = {}

-- v1 for wisp.nginx.run: arg is the body kind
local encode = E.encode
M.protocol = {
    module = "wisp.nginx.v1.predict",
    decode = function(e, b, body, blen, kind, max_rows) return D.decode(e, b, kind, body, blen, max_rows) end,
    encode = function(sink, e, d, out, device)
        local status, text = encode(e, d.n, out, d.bad, d.errs, device)
        return sink.send(status, text)
    end,
    word = D.word,
}
local P = M.protocol

-- Content-Type header -> "json" | "libsvm" | "jsonl" | false (and the media type), memoised (a
-- client sends the same few headers; the memo is bounded)
local ctype_memo, ctype_memo_n = {}, 0
local function body_kind(raw)
    local m = ctype_memo[raw]
    if m ~= nil then return m, nil end
    local ctype = raw:lower():match("^%s*([^;%s]+)") or ""
    local kind = false
    if ctype == "application/json" then kind = "json"
    elseif ctype == "text/plain" or ctype == "text/x-libsvm" then kind = "libsvm"
    elseif ctype == "application/x-ndjson" or ctype == "application/jsonl" then kind = "jsonl" end
    if kind and ctype_memo_n < 64 then ctype_memo[raw] = kind; ctype_memo_n = ctype_memo_n + 1 end
    return kind, ctype
end

local function not_loaded(slot, name)
    inc("wisp_errors_total", 'kind="not_ready"')
    return fail(503, "model '" .. name .. "' is not loaded",
        { reload_error = slot.reload_error and slot.reload_error.error })
end

-- predict(slot, name, method) -> the status sent
function M.predict(slot, name, method)
    if method ~= "POST" then return method_not_allowed("POST") end
    local kind, ctype = body_kind(ngx.var.content_type or "")
    if not kind then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415,
            "unsupported Content-Type '" .. ctype
            .. "' (use application/json, application/x-ndjson, application/jsonl, text/plain or text/x-libsvm)")
    end
    local refused = H.refuse_encoding(inc)
    if refused then return refused end
    if not slot.cur then return not_loaded(slot, name) end
    -- libsvm and JSON lines go to the C parsers straight from nginx's body buffer (no Lua
    -- string: no copy, no interning, no garbage); JSON, the thread pool and a body in a
    -- temporary file take the Lua string
    local body, blen = H.read_body(kind ~= "json" and S.cfg.mode ~= "thread")
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body")
    end
    -- the version that answers: the entry serving now that the body is here (reading it
    -- yields: a reload may have swapped the entry meanwhile)
    local e = slot.cur
    if not e then return not_loaded(slot, name) end
    return RUN.held(P, e, body, blen, kind)
end

return M
