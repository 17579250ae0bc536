-- wisp/nginx/v1/encode.lua — v1's answer: {"model", "version", "version_id", "device", "predictions",
-- "bad_rows"}, the probabilities written into one reused FFI buffer (json.put_num: %.9g without
-- string.format), a bad row null with its entry in "bad_rows" ({index, error[, line]}).
-- "errors" is the same list under its 0.1.x name, kept as an alias through 0.1.x: every answer
-- with bad rows carries both, with the same content. No ngx here: the thread VM encodes with it too.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local J = require "wisp.nginx.json"

local ipairs, sort = ipairs, table.sort
local put_num, utf8_clean = J.put_num, J.utf8_clean

local M = {}

-- The answer's JSON, written into one FFI byte buffer and made a Lua string once: the head
-- ('{"model":..,"version":..,"version_id":..,"device":..,"predictions":[') is cached per entry
-- and device (string.format("%.9g") and a table.concat of 100 strings cost ~20 µs a 100-row
-- answer; this costs ~2 µs).
local u8arr = ffi.typeof("uint8_t[?]")
local obuf, obuf_cap = nil, 0

local function by_index(a, b) return a.index < b.index end

-- encode(e, n, out, bad, errs, device) -> status, JSON text ending in "\n". bad: 0-based set of
-- the unscored rows (or nil); errs: list of {index, error[, line]} (or nil), one per bad row
-- (run.lua's invariant). Every row bad: 400 with the same body and "error".
function M.encode(e, n, out, bad, errs, device)
    local heads = e.heads
    if not heads then heads = {}; e.heads = heads end
    local head = heads[device]
    if not head then
        local cj = S.cjson
        head = '{"model":' .. cj.encode(e.name) .. ',"version":' .. cj.encode(e.version)
            .. ',"version_id":' .. cj.encode(e.version_id or e.version) .. ',"device":'
            .. cj.encode(device) .. ',"predictions":['
        heads[device] = head
    end
    local status = 200
    local tail = "]}\n"
    if errs and #errs > 0 then
        sort(errs, by_index)
        for _, er in ipairs(errs) do er.error = utf8_clean(er.error) end
        local list = S.cjson.encode(errs)
        tail = '],"bad_rows":' .. list .. ',"errors":' .. list
        if #errs >= n then
            status = 400
            tail = tail .. ',"error":"no row could be scored (see bad_rows)"'
        end
        tail = tail .. "}\n"
    end
    local need = #head + n * 24 + #tail
    if need > obuf_cap then
        obuf_cap = need > 2 * obuf_cap and need or 2 * obuf_cap
        obuf = u8arr(obuf_cap)
    end
    local buf = obuf
    ffi.copy(buf, head, #head)
    local pos = #head
    if bad then
        for i = 0, n - 1 do
            if i > 0 then buf[pos] = 44; pos = pos + 1 end
            if bad[i] then ffi.copy(buf + pos, "null", 4); pos = pos + 4
            else pos = put_num(buf, pos, out[i]) end
        end
    else
        for i = 0, n - 1 do
            if i > 0 then buf[pos] = 44; pos = pos + 1 end
            pos = put_num(buf, pos, out[i])
        end
    end
    ffi.copy(buf + pos, tail, #tail)
    return status, ffi.string(buf, pos + #tail)
end

return M
