-- wisp/nginx/v2/data.lua — the "data" arrays of v2's JSON tensors read in place from the body: one pass
-- over the body (scan_json) finds each tensor's "data" array (the member "data" of an object of the
-- top-level "inputs" list) and its numbers go straight into typed buffers: the C reader's
-- (wisp_json_numbers) for a flat list, read_numbers' (doubles, as strtod reads them: Clinger's exact
-- fast path, other tokens through tonumber) for nested lists. cjson would make every number a Lua
-- value in a table (a 100-row request of 39 features: ~8000 numbers, ~1 ms); instead it decodes the
-- rest of the body, each such array replaced by []. An array holding anything but numbers and nested
-- lists (BYTES strings, null, a typo) is left to cjson as it is.
--
-- The buffers are a request's scratch set (take_scratch / give_scratch): a batch wraps them in place
-- (wisp_batch_from_csr), so they stay the request's until its answer is made, whatever it waits for.

local ffi = require "ffi"

local type, tonumber, pairs, ipairs = type, tonumber, pairs, ipairs
local fmt, floor = string.format, math.floor
local concat = table.concat

local M = {}

local C
local function lib()
    if not C then C = require("wisp.base").C end
    return C
end
local function memchr(p, c, n) return ffi.C.memchr(p, c, n) end

local PTYPE = { INT32 = ffi.typeof("const int32_t *"), INT64 = ffi.typeof("const int64_t *"),
                FP32 = ffi.typeof("const float *"), FP64 = ffi.typeof("const double *") }
M.PTYPE = PTYPE
local u8p = ffi.typeof("const uint8_t *")
local charp = ffi.typeof("const char *")
local dbl_vla, f32_vla = ffi.typeof("double[?]"), ffi.typeof("float[?]")
local i64_vla, i32_vla = ffi.typeof("int64_t[?]"), ffi.typeof("int32_t[?]")
M.VLA = { d = dbl_vla, f = f32_vla, i64 = i64_vla, i32 = i32_vla }
local POW10 = {}
for k = 0, 22 do POW10[k] = 10 ^ k end
local TWO53 = 2 ^ 53
local I32_MIN, I32_MAX = -2147483648, 2147483647

-- scratch sets: buffers by kind and slot (a request's k-th data array), grown as needed; a set is
-- one request's from take_scratch to give_scratch
local free_sets = {}
function M.take_scratch()
    local n = #free_sets
    if n > 0 then local sc = free_sets[n]; free_sets[n] = nil; return sc end
    return { d = {}, f = {}, i64 = {}, i32 = {} }
end
function M.give_scratch(sc) free_sets[#free_sets + 1] = sc end

local function scratch_buf(sc, kind, slot, n, vla)
    local t = sc[kind]
    local b = t[slot]
    if not b or b.cap < n then
        local cap = n < 64 and 64 or n
        if b and cap < 2 * b.cap then cap = 2 * b.cap end
        b = { cap = cap, p = vla(cap) }
        t[slot] = b
    end
    return b.p
end
M.scratch_buf = scratch_buf

-- the numbers of the JSON array at p[i] ('['), nested lists flattened: -> index past its ']',
-- count, allint (every token an integer of < 2^53), bigs (list of {k, start, stop}: integer
-- tokens at or beyond 2^53) | nil (not an array of numbers: cjson reads it). The text's last
-- byte is not part of a number (scan_json checks it), so the digit loops stop before its end
-- without a bounds check. One flat loop, the common tokens (integers, short decimals) on the
-- fast path: this is the per-byte cost of a JSON request (~1 ns a byte, LuaJIT).
local function read_numbers(sc, p, i, len, slot)
    local vals = scratch_buf(sc, "d", slot, 256, dbl_vla)
    local cap = sc.d[slot].cap
    local n, depth, allint, bigs = 0, 1, true, nil
    i = i + 1
    -- after '[': a value or ']'
    local c = p[i]
    while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
    if c == 93 then return i + 1, 0, true, nil end
    while i < len do
        -- a value: a number or a nested '['
        if c == 91 then
            depth = depth + 1
            i = i + 1; c = p[i]
            while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
            if c == 93 then                                        -- [] inside: an empty list
                depth = depth - 1
                i = i + 1; c = p[i]
                goto after_value
            end
            goto continue
        end
        do
            local start = i
            local neg = c == 45
            if neg then i = i + 1; c = p[i] end
            local m
            if c == 48 then
                m = 0
                i = i + 1; c = p[i]
                if c >= 48 and c <= 57 then return nil end          -- a leading zero
            elseif c > 48 and c <= 57 then
                m = c - 48
                i = i + 1; c = p[i]
                while c >= 48 and c <= 57 do
                    m = m * 10 + (c - 48)
                    i = i + 1; c = p[i]
                end
            else
                return nil
            end
            local v
            if c == 46 or c == 101 or c == 69 then                   -- a fraction and/or an exponent
                local e10 = 0
                if c == 46 then
                    i = i + 1; c = p[i]
                    if c < 48 or c > 57 then return nil end
                    repeat
                        m = m * 10 + (c - 48); e10 = e10 - 1
                        i = i + 1; c = p[i]
                    until c < 48 or c > 57
                end
                if c == 101 or c == 69 then
                    i = i + 1; c = p[i]
                    local eneg = false
                    if c == 43 or c == 45 then eneg = c == 45; i = i + 1; c = p[i] end
                    if c < 48 or c > 57 then return nil end
                    local x = 0
                    repeat
                        if x < 100000 then x = x * 10 + (c - 48) end
                        i = i + 1; c = p[i]
                    until c < 48 or c > 57
                    e10 = e10 + (eneg and -x or x)
                end
                allint = false
                if m < TWO53 and e10 >= -22 and e10 <= 22 then
                    v = e10 < 0 and m / POW10[-e10] or m * POW10[e10]     -- Clinger: exactly strtod's
                else
                    local a0 = neg and start + 1 or start                 -- the magnitude's text
                    v = tonumber(ffi.string(p + a0, i - a0))
                end
            else
                v = m
                if not (m < TWO53) then
                    bigs = bigs or {}
                    bigs[#bigs + 1] = { n, start, i }
                end
            end
            if neg then v = -v end
            if n >= cap then
                local nb = dbl_vla(2 * cap)
                ffi.copy(nb, vals, 8 * n)
                sc.d[slot] = { cap = 2 * cap, p = nb }
                vals, cap = nb, 2 * cap
            end
            vals[n] = v
            n = n + 1
        end
        ::after_value::
        -- after a value: ',' or ']'
        while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
        while c == 93 do
            depth = depth - 1
            i = i + 1
            if depth == 0 then return i, n, allint, bigs end
            c = p[i]
            while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
        end
        if c ~= 44 then return nil end
        i = i + 1; c = p[i]
        while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
        ::continue::
    end
    return nil
end

-- scan_json(sc, p, len) -> skeleton (the text with each tensor's numeric "data" array made []),
-- spans (ordinal of the tensor in "inputs" -> {count, allint, bigs, slot, p = base}) | nil (cjson reads the text)
local function scan_json(sc, p, len)
    local last = len - 1
    while last >= 0 and (p[last] == 32 or p[last] == 10 or p[last] == 13 or p[last] == 9) do last = last - 1 end
    if last < 0 or p[last] ~= 125 then return nil end           -- not an object: cjson says what it is
    local kind, key = {}, {}         -- by depth: 1 object, 2 array; an object's current key
    local depth, expect_key = 0, false
    local ordinal = -1
    local spans, cuts = nil, nil
    local i = 0
    while i < len do
        local c = p[i]
        if c == 34 then                                             -- a string
            local j = i + 1
            while j < len do
                local d = p[j]
                if d == 92 then j = j + 2 elseif d == 34 then break else j = j + 1 end
            end
            if j >= len then return nil end
            if expect_key and kind[depth] == 1 then
                key[depth] = (j - i - 1 <= 8) and ffi.string(p + i + 1, j - i - 1) or false
                expect_key = false
            end
            i = j + 1
        elseif c == 123 then                                        -- {
            depth = depth + 1; kind[depth] = 1; key[depth] = false; expect_key = true
            if depth == 3 and kind[2] == 2 and key[1] == "inputs" then ordinal = ordinal + 1 end
            i = i + 1
        elseif c == 91 then                                         -- [
            if depth == 3 and key[3] == "data" and kind[3] == 1 and kind[2] == 2 and key[1] == "inputs"
               and kind[1] == 1 then
                local slot = ordinal + 1
                local close = memchr(p + i, 93, len - i)
                local z = close ~= nil and tonumber(ffi.cast(u8p, close) - p) or -1
                if z > i and memchr(p + i + 1, 91, z - i) == nil and memchr(p + i + 1, 34, z - i) == nil then
                    -- a flat list without strings: the C reader's (decode), or read_numbers' after it
                    spans = spans or {}
                    cuts = cuts or {}
                    spans[ordinal] = { flat = true, start = i, stop = z + 1, slot = slot, base = p, len = len }
                    cuts[#cuts + 1] = i; cuts[#cuts + 1] = z + 1
                    i = z + 1
                    goto next_byte
                end
                local stop, n, allint, bigs = read_numbers(sc, p, i, len, slot)
                if stop then
                    spans = spans or {}
                    cuts = cuts or {}
                    spans[ordinal] = { count = n, allint = allint, bigs = bigs, slot = slot, base = p }
                    cuts[#cuts + 1] = i; cuts[#cuts + 1] = stop
                    i = stop
                else
                    depth = depth + 1; kind[depth] = 2; i = i + 1
                end
            else
                if depth == 1 and key[1] == "inputs" then ordinal = -1; spans = nil; cuts = nil end
                depth = depth + 1; kind[depth] = 2; i = i + 1
            end
        elseif c == 125 or c == 93 then                             -- } ]
            depth = depth - 1; i = i + 1
            if depth < 0 then return nil end
        elseif c == 44 then                                         -- ,
            if kind[depth] == 1 then expect_key = true end
            i = i + 1
        else
            i = i + 1
        end
        ::next_byte::
    end
    if not cuts then return nil end
    local parts, a = {}, 0
    for k = 1, #cuts, 2 do
        parts[#parts + 1] = ffi.string(p + a, cuts[k] - a)
        parts[#parts + 1] = "[]"
        a = cuts[k + 1]
    end
    parts[#parts + 1] = ffi.string(p + a, len - a)
    return concat(parts), spans
end
M.scan_json = scan_json

-- the flat spans of scan_json, now that the tensors' datatypes are known: the C reader
-- (wisp_json_numbers) into the datatype where it takes the list (sp.tptr, sp.count), read_numbers
-- otherwise (sp.count, sp.allint, sp.bigs into the double scratch; an invalid list: sp.invalid)
local count_box = ffi.new("size_t[1]")
local C_KIND = { FP32 = { 1, 32, "f", f32_vla }, FP64 = { 1, 64, "d", dbl_vla }, INT64 = { 0, 64, "i64", i64_vla },
                 INT32 = { 0, 32, "i32", i32_vla } }
local function read_flat_spans(sc, spans, doc)
    local ins = type(doc) == "table" and doc.inputs
    local c_numbers = lib().wisp_json_numbers
    for ord, sp in pairs(spans) do
        if sp.flat then
            local t = type(ins) == "table" and ins[ord + 1]
            local dt = type(t) == "table" and t.datatype
            local ck = C_KIND[dt]
            if ck and type(t.shape) == "table" then
                -- room for one more element than the shape holds (more: ELIMIT, and read_numbers
                -- counts them for the message)
                local want = 1
                for k = 1, #t.shape do want = want * (tonumber(t.shape[k]) or 0) end
                if want >= 0 and want < 2 ^ 31 then
                    local buf = scratch_buf(sc, ck[3], sp.slot, want + 1, ck[4])
                    local rc = c_numbers(ffi.cast(charp, sp.base + sp.start), sp.stop - sp.start, ck[1], ck[2], buf,
                                         want + 1, count_box, nil)
                    if rc == 0 then sp.count, sp.tptr = tonumber(count_box[0]), ffi.cast(PTYPE[dt], buf) end
                end
            end
            if not sp.tptr then
                local stop, n, allint, bigs = read_numbers(sc, sp.base, sp.start, sp.len, sp.slot)
                if stop then sp.count, sp.allint, sp.bigs = n, allint, bigs
                else sp.invalid = true end
            end
        end
    end
end

M.read_flat_spans = read_flat_spans

-- a scanned "data" array as the tensor's datatype: -> typed pointer | nil, message | nil, nil, {} (no strings)
local function span_data(sc, name, dt, sp)
    if sp.tptr then return sp.tptr end                          -- the C reader's: the datatype already
    local n, vals = sp.count, sc.d[sp.slot].p
    if dt == "BYTES" and n == 0 then
        return nil, nil, {}                   -- an empty list: no strings to read
    elseif dt == "BYTES" then
        return nil, fmt("input '%s' (BYTES): data[0] is a number, a string expected", name)
    elseif dt == "FP64" then
        return ffi.cast(PTYPE.FP64, vals)
    elseif dt == "FP32" then
        local f = scratch_buf(sc, "f", sp.slot, n, f32_vla)
        for k = 0, n - 1 do f[k] = vals[k] end
        return ffi.cast(PTYPE.FP32, f)
    end
    -- INT64 / INT32: every token an integer; those at or beyond 2^53 read exactly here
    local bigk = {}
    if sp.bigs then for _, b in ipairs(sp.bigs) do bigk[b[1]] = b end end
    if not sp.allint then
        for k = 0, n - 1 do
            local v = vals[k]
            if not bigk[k] and (v ~= floor(v) or v >= TWO53 or v <= -TWO53) then
                if v == floor(v) then
                    return nil, fmt("input '%s' (%s): data[%d] = %s: a number beyond 2^53 written with a fraction "
                                    .. "or an exponent is not read exactly; write it as an integer",
                                    name, dt, k, fmt("%.17g", v))
                end
                return nil, fmt("input '%s' (%s): data[%d] is %s, an integer expected", name, dt, k, fmt("%.17g", v))
            end
        end
    end
    if dt == "INT32" then
        if sp.bigs then
            local b = sp.bigs[1]
            return nil, fmt("input '%s' (INT32): data[%d] = %s is out of the range of INT32", name, b[1],
                            ffi.string(sp.base + b[2], b[3] - b[2]))
        end
        local a = scratch_buf(sc, "i32", sp.slot, n, i32_vla)
        for k = 0, n - 1 do
            local v = vals[k]
            if v < I32_MIN or v > I32_MAX then
                return nil, fmt("input '%s' (INT32): data[%d] = %s is out of the range of INT32", name, k,
                                fmt("%.17g", v))
            end
            a[k] = v
        end
        return ffi.cast(PTYPE.INT32, a)
    end
    local a = scratch_buf(sc, "i64", sp.slot, n, i64_vla)
    for k = 0, n - 1 do a[k] = vals[k] end
    if sp.bigs then
        local base = sp.base
        for _, b in ipairs(sp.bigs) do
            local k, i, z = b[1], b[2], b[3]
            local neg = base[i] == 45
            if neg then i = i + 1 end
            local m = 0ULL
            local lim = neg and 9223372036854775808ULL or 9223372036854775807ULL
            for j = i, z - 1 do
                local d = base[j] - 48
                if m > (lim - d) / 10 then
                    return nil, fmt("input '%s' (INT64): data[%d] = %s is out of the range of INT64", name, k,
                                    ffi.string(base + b[2], z - b[2]))
                end
                m = m * 10 + d
            end
            a[k] = neg and -ffi.cast("int64_t", m) or ffi.cast("int64_t", m)
        end
    end
    return ffi.cast(PTYPE.INT64, a)
end

M.span_data = span_data

return M
