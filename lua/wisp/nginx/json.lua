-- wisp/nginx/json.lua — the JSON pieces both protocols and the HTTP edge share: what a decoded value is
-- (a list, an object; said in words for messages), probabilities written as %.9g without
-- string.format (put_num, float_items), and every message made valid UTF-8. No ngx here: the thread
-- VM encodes its answers with it too.

local ffi = require "ffi"
local S = require "wisp.nginx.state"

local type, tostring, pairs, next = type, tostring, pairs, next
local fmt, concat, floor, huge = string.format, table.concat, math.floor, math.huge

local M = {}

-- JSON values as cjson decodes them (lua-cjson 2.1 marks no arrays): a list is a table
-- whose keys are exactly 1..#t (an empty table counts as a list: {} and [] decode alike);
-- an object any other table (an empty one too)
local function is_list(t)
    if type(t) ~= "table" then return false end
    local n = #t
    if n == 0 then return next(t) == nil end
    local k = 0
    for _ in pairs(t) do k = k + 1 end
    return k == n
end
local function is_object(t) return type(t) == "table" and (next(t) == nil or not is_list(t)) end
M.is_list, M.is_object = is_list, is_object

-- what a JSON value is, for messages: the string "1", a list, an object, null, true, 1.5
function M.what(v)
    local t = type(v)
    if v == nil then return "nothing (the key is missing)" end
    if t == "string" then
        return "the string " .. S.cjson.encode(#v > 40 and v:sub(1, 40) .. "..." or v)
    end
    if t == "table" then
        if next(v) == nil then return "an empty list or object" end
        return is_list(v) and "a list" or "an object"
    end
    if t == "number" then
        if v ~= v then return "NaN" elseif v == huge then return "a number beyond the range of a double (read as +inf)"
        elseif v == -huge then return "a number beyond the range of a double (read as -inf)" end
        return fmt("%.17g", v)
    end
    if t == "boolean" then return tostring(v) end
    if S.cjson and v == S.cjson.null then return "null" end
    return t
end

local u8arr = ffi.typeof("uint8_t[?]")
local DIG2 = ffi.new("uint8_t[200]")       -- "00".."99"
for i = 0, 99 do DIG2[2 * i] = 48 + floor(i / 10); DIG2[2 * i + 1] = 48 + i % 10 end

-- Write x at buf[pos] as %.9g would for 1e-4 <= x < 1 (what a probability nearly always
-- is): "0.", the leading zeros, then 9 significant digits, correctly rounded but for
-- ties within one part in 2^53 (a float32 round-trips through 9 digits), trailing zeros
-- dropped. 0 and 1 print as "0" and "1"; NaN and infinities as null; anything else
-- goes through string.format("%.9g"). No loops (each would be a trace of its own):
-- returns the position after the text.
local function put_num(buf, pos, x)
    if x >= 1e-4 and x < 1 then
        local z, m
        -- z zeros after "0."; m: 9 significant digits (the decade bounds are doubles
        -- next to 10^-k: a rounded-up m of 10^9 or a low one under 10^8 moves z)
        if x >= 0.1 then z = 0; m = floor(x * 1e9 + 0.5)
        elseif x >= 0.01 then z = 1; m = floor(x * 1e10 + 0.5)
        elseif x >= 0.001 then z = 2; m = floor(x * 1e11 + 0.5)
        else z = 3; m = floor(x * 1e12 + 0.5) end
        if m < 1e8 then z = z + 1; m = floor(x * 10 ^ (9 + z) + 0.5) end
        if m >= 1e9 then
            m = 1e8; z = z - 1
            if z < 0 then buf[pos] = 49; return pos + 1 end      -- "1"
        end
        buf[pos] = 48; buf[pos + 1] = 46; buf[pos + 2] = 48; buf[pos + 3] = 48; buf[pos + 4] = 48
        buf[pos + 5] = 48                     -- "0.0000", of which z zeros stay
        pos = pos + 2 + z
        -- 9 digits: 1 + 4 pairs, split as 5 + 4 digits and then in pairs, without a
        -- division: floor((k + 0.5) * 10^-j) is floor(k / 10^j) for integers k < 2^30
        -- (the error of the product is far below the 0.5 * 10^-j margin); the splits
        -- of the two halves are independent (a shorter dependency chain than 4 divides)
        local hi = floor((m + 0.5) * 1e-4)
        local lo = m - hi * 1e4
        local d = floor((hi + 0.5) * 1e-4)
        local r = hi - d * 1e4
        local p1 = floor((r + 0.5) * 1e-2)
        local p2 = r - p1 * 100
        local p3 = floor((lo + 0.5) * 1e-2)
        local p4 = lo - p3 * 100
        buf[pos] = 48 + d
        buf[pos + 1] = DIG2[2 * p1]; buf[pos + 2] = DIG2[2 * p1 + 1]
        buf[pos + 3] = DIG2[2 * p2]; buf[pos + 4] = DIG2[2 * p2 + 1]
        buf[pos + 5] = DIG2[2 * p3]; buf[pos + 6] = DIG2[2 * p3 + 1]
        buf[pos + 7] = DIG2[2 * p4]; buf[pos + 8] = DIG2[2 * p4 + 1]
        pos = pos + 9
        if p4 == 0 then                       -- trailing zeros (the first digit is not 0)
            pos = pos - 2
            if p3 == 0 then
                pos = pos - 2
                if p2 == 0 then pos = pos - 2; if p1 == 0 then pos = pos - 2 end end
            end
        end
        if buf[pos - 1] == 48 then pos = pos - 1 end
        return pos
    elseif x == 0 then
        buf[pos] = 48; return pos + 1
    elseif x == 1 then
        buf[pos] = 49; return pos + 1
    elseif x ~= x or x == huge or x == -huge then
        ffi.copy(buf + pos, "null", 4); return pos + 4
    end
    local t = fmt("%.9g", x)
    ffi.copy(buf + pos, t, #t)
    return pos + #t
end

M.put_num = put_num

-- n values of out (an FFI float array) as JSON list items "p,p,..." (null for the rows in bad,
-- a 0-based set or nil, and for NaN and infinities), written into a reused buffer: v2's "data"
-- of a JSON output, and the check of put_num against string.format (spec/nginx/format_check.lua)
local lbuf, lbuf_cap = nil, 0
function M.float_items(out, n, bad)
    local need = n * 24 + 16
    if need > lbuf_cap then
        lbuf_cap = need > 2 * lbuf_cap and need or 2 * lbuf_cap
        lbuf = u8arr(lbuf_cap)
    end
    local buf, pos = lbuf, 0
    for i = 0, n - 1 do
        if i > 0 then buf[pos] = 44; pos = pos + 1 end
        if bad and bad[i] then ffi.copy(buf + pos, "null", 4); pos = pos + 4
        else pos = put_num(buf, pos, out[i]) end
    end
    return ffi.string(buf, pos)
end

-- s as valid UTF-8: each byte that starts no valid sequence becomes U+FFFD. Messages
-- quote what clients sent (a URI, a model name, a body's bytes); cjson copies string bytes
-- as they are, and an answer with invalid UTF-8 is not JSON (found by spec/nginx/svcfuzz.sh)
local byte = string.byte
local function utf8_clean(s)
    if not s:find("[\128-\255]") then return s end
    local out, i, n = {}, 1, #s
    while i <= n do
        local c = byte(s, i)
        local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3
            or (c >= 0xF0 and c <= 0xF4) and 4 or 0
        local good = len > 0 and i + len - 1 <= n
        if good and len > 1 then
            for k = 1, len - 1 do
                local cc = byte(s, i + k)
                if cc < 0x80 or cc > 0xBF then good = false; break end
            end
            local c2 = byte(s, i + 1)
            if good and ((c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) or (c == 0xF0 and c2 < 0x90)
                         or (c == 0xF4 and c2 > 0x8F)) then good = false end
        end
        if good then out[#out + 1] = s:sub(i, i + len - 1); i = i + len
        else out[#out + 1] = "\239\191\189"; i = i + 1 end
    end
    return concat(out)
end
M.utf8_clean = utf8_clean

-- every string in t (tables to a few levels) as valid UTF-8, in place
local function clean_strings(t, depth)
    for k, v in pairs(t) do
        if type(v) == "string" then t[k] = utf8_clean(v)
        elseif type(v) == "table" and depth < 6 then clean_strings(v, depth + 1) end
    end
    return t
end
M.clean_strings = clean_strings

return M
