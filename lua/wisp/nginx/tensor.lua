-- wisp/nginx/tensor.lua — an Open Inference Protocol (KServe v2) infer request decoded and turned into
-- rows: its JSON (inputs, requested outputs, parameters, id), the tensors' data (JSON lists, or the
-- binary tensor data extension's raw little-endian buffers read in place from nginx's body buffer:
-- no copy), every check of shapes, datatypes and sizes (a protocol error: nil, status, message),
-- and the tensors made a batch (a model without columns: indptr, indices, values) or the entry's raw
-- batch (a model with feature columns: one tensor per input), with the bad rows each reports.
--
-- No library is touched at require time (routes.lua is loaded in nginx's master): the C functions
-- are looked up on first use.

local ffi = require "ffi"
local S = require "wisp.nginx.state"

local type, tostring, tonumber, pairs, ipairs, next = type, tostring, tonumber, pairs, ipairs, next
local fmt, floor, huge = string.format, math.floor, math.huge
local concat = table.concat

local M = {}

local C
local function lib()
    if not C then C = require("wisp.base").C end
    return C
end
local function lib_K(name) return require("wisp.base").K[name] end

-- the datatypes wisp reads, their element sizes, and the pointer types of their buffers
local ESIZE = { INT32 = 4, INT64 = 8, FP32 = 4, FP64 = 8 }
local PTYPE = { INT32 = ffi.typeof("const int32_t *"), INT64 = ffi.typeof("const int64_t *"),
                FP32 = ffi.typeof("const float *"), FP64 = ffi.typeof("const double *") }
local KNOWN = { BOOL = true, UINT8 = true, UINT16 = true, UINT32 = true, UINT64 = true, INT8 = true, INT16 = true,
                INT32 = true, INT64 = true, FP16 = true, FP32 = true, FP64 = true, BYTES = true, BF16 = true }
local u8p = ffi.typeof("const uint8_t *")
local charp = ffi.typeof("const char *")
local u32p = ffi.typeof("const uint32_t *")
local u64_vla, f32_vla = ffi.typeof("uint64_t[?]"), ffi.typeof("float[?]")
M.ESIZE = ESIZE

-- JSON values as cjson decodes them: a list is a table whose keys are exactly 1..#t
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

local function what(v)
    local t = type(v)
    if t == "string" then return "the string " .. S.cjson.encode(#v > 40 and v:sub(1, 40) .. "..." or v) end
    if t == "table" then return next(v) == nil and "an empty list or object" or (is_list(v) and "a list" or "an object") end
    if t == "number" then return fmt("%.17g", v) end
    if v == nil then return "nothing" end
    if S.cjson and v == S.cjson.null then return "null" end
    return tostring(v)
end

local function shape_text(shape) return "[" .. concat(shape, ", ") .. "]" end

-- nested JSON lists flattened in row-major order into out (the protocol allows both forms)
local function flatten(v, out, depth)
    for i = 1, #v do
        local x = v[i]
        if type(x) == "table" and depth < 8 then
            if not is_list(x) then return nil end
            if not flatten(x, out, depth + 1) then return nil end
        else
            out[#out + 1] = x
        end
    end
    return out
end

local I32_MIN, I32_MAX, I53 = -2147483648, 2147483647, 9007199254740992

-- check the decoded JSON data of a tensor: -> true | nil, message
local function check_json_data(name, dt, list)
    for i = 1, #list do
        local v = list[i]
        if dt == "BYTES" then
            if type(v) ~= "string" then
                return nil, fmt("input '%s' (BYTES): data[%d] is %s, a string expected", name, i - 1, what(v))
            end
        elseif type(v) ~= "number" then
            return nil, fmt("input '%s' (%s): data[%d] is %s, a number expected", name, dt, i - 1, what(v))
        elseif dt == "INT64" or dt == "INT32" then
            if v ~= floor(v) or v ~= v then
                return nil, fmt("input '%s' (%s): data[%d] is %s, an integer expected", name, dt, i - 1, what(v))
            end
            if dt == "INT32" and (v < I32_MIN or v > I32_MAX) then
                return nil, fmt("input '%s' (INT32): data[%d] = %s is out of the range of INT32", name, i - 1, what(v))
            end
            if dt == "INT64" and (v >= I53 or v <= -I53) then
                return nil, fmt("input '%s' (INT64): data[%d] = %s: a JSON integer at or beyond 2^53 is not read exactly "
                    .. "here (JSON numbers are doubles); send this tensor in the binary tensor data extension", name, i - 1, what(v))
            end
        end
    end
    return true
end

-- BYTES elements of a binary buffer: 4-byte little-endian lengths, each followed by its bytes.
-- -> offsets, lengths (Lua lists, 0-based into base) | nil, message
local function bytes_elements(name, base, off, size, count)
    local offs, lens = {}, {}
    local p, z = off, off + size
    for i = 1, count do
        if p + 4 > z then
            return nil, fmt("input '%s' (BYTES): binary data of %d bytes ends inside element %d's length (shape holds %d elements)",
                            name, size, i - 1, count)
        end
        local len = base[p] + base[p + 1] * 256 + base[p + 2] * 65536 + base[p + 3] * 16777216
        p = p + 4
        if p + len > z then
            return nil, fmt("input '%s' (BYTES): element %d's length %d runs past the tensor's %d bytes", name, i - 1, len, size)
        end
        offs[i], lens[i] = p, len
        p = p + len
    end
    if p ~= z then
        return nil, fmt("input '%s' (BYTES): %d elements take %d bytes, binary_data_size says %d", name, count, p - off, size)
    end
    return offs, lens
end

-- ---- the JSON tensors' "data" arrays, read in place --------------------------------------------
-- cjson would make every number of a request a Lua value in a table (a 100-row request of 39
-- features: ~8000 numbers, ~1 ms). Instead one pass over the body (scan_json) finds each tensor's
-- "data" array (the member "data" of an object of the top-level "inputs" list) and reads its
-- numbers straight into a reused double buffer, as strtod reads them (Clinger's exact fast path;
-- other tokens through tonumber, i.e. strtod); the rest of the body, each such array replaced by
-- [], is what cjson decodes. An array holding anything but numbers and nested lists (BYTES
-- strings, null, a typo) is left to cjson as it is, and checked as before.
local dbl_vla = ffi.typeof("double[?]")
local i64_vla, i32_vla = ffi.typeof("int64_t[?]"), ffi.typeof("int32_t[?]")
local POW10 = {}
for k = 0, 22 do POW10[k] = 10 ^ k end
local TWO53 = 2 ^ 53

local read_flat_spans
pcall(ffi.cdef, "void *memchr(const void *s, int c, size_t n);")

-- scratch buffers by kind and slot (a request's k-th data array), grown as needed
local scratch = { d = {}, f = {}, i64 = {}, i32 = {} }
local function scratch_buf(kind, slot, n, vla)
    local t = scratch[kind]
    local b = t[slot]
    if not b or b.cap < n then
        local cap = n < 64 and 64 or n
        if b and cap < 2 * b.cap then cap = 2 * b.cap end
        b = { cap = cap, p = vla(cap) }
        t[slot] = b
    end
    return b.p
end

-- the numbers of the JSON array at p[i] ('['), nested lists flattened: -> index past its ']',
-- count, allint (every token an integer of < 2^53), bigs (list of {k, start, stop}: integer
-- tokens at or beyond 2^53) | nil (not an array of numbers: cjson reads it). The text's last
-- byte is not part of a number (scan_json checks it), so the digit loops stop before its end
-- without a bounds check. One flat loop, the common tokens (integers, short decimals) on the
-- fast path: this is the per-byte cost of a JSON request (~1 ns a byte, LuaJIT).
local function read_numbers(p, i, len, slot)
    local vals = scratch_buf("d", slot, 256, dbl_vla)
    local cap = scratch.d[slot].cap
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
                scratch.d[slot] = { cap = 2 * cap, p = nb }
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

-- scan_json(p, len) -> skeleton (the text with each tensor's numeric "data" array made []),
-- spans (ordinal of the tensor in "inputs" -> {count, allint, bigs, slot, p = base}) | nil (cjson reads the text)
local function scan_json(p, len)
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
            if depth == 3 and key[3] == "data" and kind[3] == 1 and kind[2] == 2 and key[1] == "inputs" and kind[1] == 1 then
                local slot = ordinal + 1
                local close = ffi.C.memchr(p + i, 93, len - i)
                local z = close ~= nil and tonumber(ffi.cast(u8p, close) - p) or -1
                if z > i and ffi.C.memchr(p + i + 1, 91, z - i) == nil and ffi.C.memchr(p + i + 1, 34, z - i) == nil then
                    -- a flat list without strings: the C reader's (decode), or read_numbers' after it
                    spans = spans or {}
                    cuts = cuts or {}
                    spans[ordinal] = { flat = true, start = i, stop = z + 1, slot = slot, base = p, len = len }
                    cuts[#cuts + 1] = i; cuts[#cuts + 1] = z + 1
                    i = z + 1
                    goto next_byte
                end
                local stop, n, allint, bigs = read_numbers(p, i, len, slot)
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

-- A flat list (no nested list, no string) of a tensor whose datatype is known: integers
-- (INT64, INT32) or decimals (FP32) read straight into that type, on the loop that costs least
-- per byte (~1.3 ns here: LuaJIT's floor for a byte loop); anything else in it (an exponent, a
-- fraction for an int, an int at or beyond 2^53, a typo) -> nil: read_numbers reads it again.
local function read_typed(p, i, slot, dt)
    local out, vla, kind
    if dt == "FP32" then kind, vla = "f", f32_vla elseif dt == "INT32" then kind, vla = "i32", i32_vla else kind, vla = "i64", i64_vla end
    out = scratch_buf(kind, slot, 256, vla)
    local cap = scratch[kind][slot].cap
    local isfloat, is32 = dt == "FP32", dt == "INT32"
    local n = 0
    i = i + 1
    local c = p[i]
    while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
    if c == 93 then return i + 1, 0, out end
    while true do
        local neg = c == 45
        if neg then i = i + 1; c = p[i] end
        local m
        if c == 48 then
            m = 0
            i = i + 1; c = p[i]
            if c >= 48 and c <= 57 then return nil end
        elseif c > 48 and c <= 57 then
            m = c - 48
            i = i + 1; c = p[i]
            while c >= 48 and c <= 57 do m = m * 10 + (c - 48); i = i + 1; c = p[i] end
        else
            return nil
        end
        local v
        if c == 46 then
            if not isfloat then return nil end
            i = i + 1; c = p[i]
            if c < 48 or c > 57 then return nil end
            local e = 0
            repeat m = m * 10 + (c - 48); e = e + 1; i = i + 1; c = p[i] until c < 48 or c > 57
            if e > 22 or m >= TWO53 or c == 101 or c == 69 then return nil end
            v = m / POW10[e]                                  -- Clinger: exactly strtod's
        elseif c == 101 or c == 69 or m >= TWO53 then
            return nil
        else
            v = m
        end
        if neg then v = -v end
        if is32 and (v < I32_MIN or v > I32_MAX) then return nil end
        if n >= cap then
            local nb = vla(2 * cap)
            ffi.copy(nb, out, ffi.sizeof(nb) / 2)
            scratch[kind][slot] = { cap = 2 * cap, p = nb }
            out, cap = nb, 2 * cap
        end
        out[n] = v
        n = n + 1
        while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
        if c == 44 then
            i = i + 1; c = p[i]
            while c == 32 or c == 10 or c == 13 or c == 9 do i = i + 1; c = p[i] end
        elseif c == 93 then
            return i + 1, n, out
        else
            return nil
        end
    end
end

-- the flat spans of scan_json, now that the tensors' datatypes are known: read_typed where it
-- can (sp.tptr, sp.count: already the datatype), read_numbers otherwise (sp.count, sp.allint,
-- sp.bigs into the double scratch; an invalid list: sp.invalid)
local c_numbers = nil            -- wisp_json_numbers (engine/batch/oip.c), or false with an older libwisp
local count_box = ffi.new("size_t[1]")
local C_KIND = { FP32 = { 1, 32, "f", f32_vla }, FP64 = { 1, 64, "d", dbl_vla }, INT64 = { 0, 64, "i64", i64_vla },
                 INT32 = { 0, 32, "i32", i32_vla } }
read_flat_spans = function(spans, doc)
    local ins = type(doc) == "table" and doc.inputs
    if c_numbers == nil then
        local ok, fn = pcall(function() return lib().wisp_json_numbers end)
        c_numbers = ok and fn or false
    end
    for ord, sp in pairs(spans) do
        if sp.flat then
            local t = type(ins) == "table" and ins[ord + 1]
            local dt = type(t) == "table" and t.datatype
            local ck = C_KIND[dt]
            if ck and c_numbers and type(t.shape) == "table" then
                -- the C reader (engine/batch/oip.c), into the tensor's datatype; room for one more
                -- element than the shape holds (more: ELIMIT, and read_numbers counts them)
                local want = 1
                for k = 1, #t.shape do want = want * (tonumber(t.shape[k]) or 0) end
                if want >= 0 and want < 2 ^ 31 then
                    local buf = scratch_buf(ck[3], sp.slot, want + 1, ck[4])
                    local rc = c_numbers(ffi.cast(charp, sp.base + sp.start), sp.stop - sp.start, ck[1], ck[2], buf, want + 1, count_box, nil)
                    if rc == 0 then sp.count, sp.tptr = tonumber(count_box[0]), ffi.cast(PTYPE[dt], buf) end
                end
            end
            if not sp.tptr and (dt == "FP32" or dt == "INT64" or dt == "INT32") then
                local stop, n, ptr = read_typed(sp.base, sp.start, sp.slot, dt)
                if stop then sp.count, sp.tptr = n, ffi.cast(PTYPE[dt], ptr) end
            end
            if not sp.tptr then
                local stop, n, allint, bigs = read_numbers(sp.base, sp.start, sp.len, sp.slot)
                if stop then sp.count, sp.allint, sp.bigs = n, allint, bigs
                else sp.invalid = true end
            end
        end
    end
end

-- a scanned "data" array as the tensor's datatype: -> typed pointer | nil, message
local function span_data(name, dt, sp)
    if sp.tptr then return sp.tptr end                          -- read_typed's: the datatype already
    local n, vals = sp.count, scratch.d[sp.slot].p
    if dt == "BYTES" and n == 0 then
        return nil, nil, {}                   -- an empty list: no strings to read
    elseif dt == "BYTES" then
        return nil, fmt("input '%s' (BYTES): data[0] is a number, a string expected", name)
    elseif dt == "FP64" then
        return ffi.cast(PTYPE.FP64, vals)
    elseif dt == "FP32" then
        local f = scratch_buf("f", sp.slot, n, f32_vla)
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
                    return nil, fmt("input '%s' (%s): data[%d] = %s: a number beyond 2^53 written with a fraction or an exponent is not read exactly; write it as an integer",
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
        local a = scratch_buf("i32", sp.slot, n, i32_vla)
        for k = 0, n - 1 do
            local v = vals[k]
            if v < I32_MIN or v > I32_MAX then
                return nil, fmt("input '%s' (INT32): data[%d] = %s is out of the range of INT32", name, k, fmt("%.17g", v))
            end
            a[k] = v
        end
        return ffi.cast(PTYPE.INT32, a)
    end
    local a = scratch_buf("i64", sp.slot, n, i64_vla)
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

-- decode(body, blen, hlen) -> req | nil, status, message
-- body: a Lua string or a pointer to blen bytes (nginx's buffer: it lives until the request
-- ends); hlen: the Inference-Header-Content-Length header's value (string) or nil.
-- req = { id =, parameters = (table or nil), inputs = {name -> tensor}, names = {in order},
--         outputs = nil | list of {name =, binary = true|false|nil}, binary_output = bool, body = body }
-- tensor = { name, datatype, shape = {...}, count, parameters, and either list (JSON: the
--            flattened data) or ptr (binary: typed pointer to count elements; BYTES: base, offs, lens) }
function M.decode(body, blen, hlen_text)
    local base
    if type(body) == "string" then base = ffi.cast(u8p, body) else base = ffi.cast(u8p, body) end
    local hlen
    if hlen_text ~= nil then
        if type(hlen_text) == "table" then return nil, 400, "Inference-Header-Content-Length given more than once" end
        hlen = tonumber(hlen_text)
        if not hlen or hlen ~= floor(hlen) or hlen <= 0 or not hlen_text:match("^%s*%d+%s*$") then
            return nil, 400, "Inference-Header-Content-Length: a positive integer expected, got '" .. hlen_text:sub(1, 40) .. "'"
        end
        if hlen > blen then
            return nil, 400, fmt("Inference-Header-Content-Length %d is longer than the body (%d bytes)", hlen, blen)
        end
    end
    local jlen = hlen or blen
    local text, spans = scan_json(base, jlen)
    local doc, jerr
    if text then
        doc, jerr = S.cjson.decode(text)
        if doc ~= nil and spans then
            read_flat_spans(spans, doc)
            for _, sp in pairs(spans) do
                if sp.invalid then spans = nil; break end            -- [1, null]: cjson reads it all, and says what is wrong
            end
            if not spans then doc = nil end
        end
    end
    if doc == nil then
        spans = nil
        text = type(body) == "string" and (jlen == #body and body or body:sub(1, jlen)) or ffi.string(base, jlen)
        doc, jerr = S.cjson.decode(text)
    end
    if doc == nil then
        return nil, 400, "bad JSON" .. (hlen and " in the inference header" or "") .. ": " .. tostring(jerr)
            .. (hlen == nil and blen > 0 and text:find("%z") and " (binary data without Inference-Header-Content-Length?)" or "")
    end
    if not is_object(doc) or next(doc) == nil then
        return nil, 400, 'an inference request object {"inputs": [...]} expected, got ' .. what(doc)
    end
    local req = { body = body, inputs = {}, names = {} }
    if doc.id ~= nil then
        if type(doc.id) ~= "string" then return nil, 400, '"id": a string expected, got ' .. what(doc.id) end
        req.id = doc.id
    end
    local params = doc.parameters
    if params ~= nil then
        if not is_object(params) then return nil, 400, '"parameters": an object expected, got ' .. what(params) end
        req.parameters = params
        local bo = params.binary_data_output
        if bo ~= nil and type(bo) ~= "boolean" then
            return nil, 400, '"parameters"."binary_data_output": true or false expected, got ' .. what(bo)
        end
        req.binary_output = bo == true
    end
    local outs = doc.outputs
    if outs ~= nil then
        if not is_list(outs) then return nil, 400, '"outputs": a list of {"name": ...} expected, got ' .. what(outs) end
        local list, seen = {}, {}
        for i, o in ipairs(outs) do
            if not is_object(o) or type(o.name) ~= "string" then
                return nil, 400, fmt('"outputs"[%d]: an object {"name": "..."} expected, got %s', i - 1, what(o))
            end
            if seen[o.name] then return nil, 400, fmt("output '%s' requested twice", o.name) end
            seen[o.name] = true
            local bin
            local op = o.parameters
            if op ~= nil then
                if not is_object(op) then return nil, 400, fmt("output '%s': \"parameters\": an object expected", o.name) end
                if op.binary_data ~= nil then
                    if type(op.binary_data) ~= "boolean" then
                        return nil, 400, fmt("output '%s': \"binary_data\": true or false expected, got %s", o.name, what(op.binary_data))
                    end
                    bin = op.binary_data
                end
                if op.class_count ~= nil and op.class_count ~= 0 then
                    return nil, 400, fmt("output '%s': class_count: the classification extension is not supported", o.name)
                end
            end
            list[i] = { name = o.name, binary = bin }
        end
        req.outputs = list
    end
    local ins = doc.inputs
    if not is_list(ins) or #ins == 0 then
        return nil, 400, '"inputs": a non-empty list of input tensors expected, got ' .. what(ins)
    end
    local off = hlen or blen
    for i, t in ipairs(ins) do
        if not is_object(t) then return nil, 400, fmt('"inputs"[%d]: a tensor object expected, got %s', i - 1, what(t)) end
        local name = t.name
        if type(name) ~= "string" or name == "" then
            return nil, 400, fmt('"inputs"[%d]: "name": a non-empty string expected, got %s', i - 1, what(name))
        end
        if req.inputs[name] then return nil, 400, fmt("input '%s' given twice", name) end
        local dt = t.datatype
        if type(dt) ~= "string" then return nil, 400, fmt("input '%s': \"datatype\": a string expected, got %s", name, what(dt)) end
        if not KNOWN[dt] then return nil, 400, fmt("input '%s': unknown datatype '%s'", name, dt:sub(1, 40)) end
        if not (ESIZE[dt] or dt == "BYTES") then
            return nil, 400, fmt("input '%s': datatype %s is not one wisp reads (INT32, INT64, FP32, FP64, BYTES)", name, dt)
        end
        local shape = t.shape
        if not is_list(shape) then return nil, 400, fmt("input '%s': \"shape\": a list of dimensions expected, got %s", name, what(shape)) end
        local count = 1
        for k = 1, #shape do
            local d = shape[k]
            if type(d) ~= "number" or d ~= floor(d) or d < 0 or d > 2147483647 then
                return nil, 400, fmt("input '%s': shape[%d] is %s, a non-negative integer expected", name, k - 1, what(d))
            end
            count = count * d
        end
        if count > 2 ^ 40 then return nil, 400, fmt("input '%s': shape %s holds too many elements", name, shape_text(shape)) end
        local tp = t.parameters
        if tp ~= nil and not is_object(tp) then return nil, 400, fmt("input '%s': \"parameters\": an object expected", name) end
        local tensor = { name = name, datatype = dt, shape = shape, count = count, parameters = tp }
        local bsize = tp and tp.binary_data_size
        if bsize ~= nil then
            if type(bsize) ~= "number" or bsize ~= floor(bsize) or bsize < 0 then
                return nil, 400, fmt("input '%s': binary_data_size: a non-negative integer expected, got %s", name, what(bsize))
            end
            if not hlen then
                return nil, 400, fmt("input '%s' has binary_data_size but the request has no Inference-Header-Content-Length header", name)
            end
            if t.data ~= nil then return nil, 400, fmt("input '%s': both \"data\" and binary_data_size", name) end
            if off + bsize > blen then
                return nil, 400, fmt("input '%s': binary_data_size %d runs past the body (%d bytes of binary data left)", name, bsize, blen - off)
            end
            if dt == "BYTES" then
                local offs, lens = bytes_elements(name, base, off, bsize, count)
                if not offs then return nil, 400, lens end
                tensor.base, tensor.offs, tensor.lens = ffi.cast(charp, base), offs, lens
            else
                if bsize ~= count * ESIZE[dt] then
                    return nil, 400, fmt("input '%s': shape %s of %s is %d bytes, binary_data_size says %d", name,
                                         shape_text(shape), dt, count * ESIZE[dt], bsize)
                end
                tensor.ptr = ffi.cast(PTYPE[dt], base + off)
            end
            off = off + bsize
        elseif spans and spans[i - 1] and type(t.data) == "table" and next(t.data) == nil then
            -- the numbers scan_json read in place
            local sp = spans[i - 1]
            if sp.count ~= count then
                return nil, 400, fmt("input '%s': shape %s holds %d elements, \"data\" has %d", name, shape_text(shape), count, sp.count)
            end
            local ptr, err, list = span_data(name, dt, sp)
            if list then tensor.list = list
            elseif not ptr then return nil, 400, err
            else tensor.ptr = ptr end
        else
            local data = t.data
            if data == nil then return nil, 400, fmt("input '%s': no \"data\" (and no binary_data_size)", name) end
            if not is_list(data) then return nil, 400, fmt("input '%s': \"data\": a list expected, got %s", name, what(data)) end
            local flat = data
            if type(data[1]) == "table" then
                flat = flatten(data, {}, 0)
                if not flat then return nil, 400, fmt("input '%s': \"data\": nested lists of values expected", name) end
            end
            if #flat ~= count then
                return nil, 400, fmt("input '%s': shape %s holds %d elements, \"data\" has %d", name, shape_text(shape), count, #flat)
            end
            local ok, err = check_json_data(name, dt, flat)
            if not ok then return nil, 400, err end
            tensor.list = flat
        end
        req.inputs[name] = tensor
        req.names[#req.names + 1] = name
    end
    if hlen and off ~= blen then
        return nil, 400, fmt("the body has %d bytes of binary data after the %d-byte header; the inputs' binary_data_size add up to %d",
                             blen - hlen, hlen, off - hlen)
    end
    return req
end

-- element i (0-based) of an offsets tensor, its typed pointer or its Lua list: a Lua number.
-- (No closure a request: a function made per request (FNEW) stops LuaJIT compiling the
-- request's path, which then runs interpreted.)
local function at(ptr, list, i)
    if ptr then return tonumber(ptr[i]) end
    return list[i + 1]
end

-- An offsets tensor (indptr, NAME_indptr): INT64 or INT32, 1-D, [rows + 1], starting at 0,
-- non-decreasing, ending at nnz. -> rows, ptr, list (read with at: 0-based, a Lua number) |
-- nil, status, message
local function offsets(t, nnz, what_nnz)
    local name = t.name
    if t.datatype ~= "INT64" and t.datatype ~= "INT32" then
        return nil, 400, fmt("input '%s': datatype INT64 or INT32 expected, got %s", name, t.datatype)
    end
    if #t.shape ~= 1 then
        return nil, 400, fmt("input '%s': a 1-D tensor [rows + 1] expected, got shape %s", name, shape_text(t.shape))
    end
    local n1 = t.count
    if n1 < 1 then return nil, 400, fmt("input '%s': shape [0]: at least [1] (zero rows) expected", name) end
    local ptr, list = t.ptr, t.list
    local prev = at(ptr, list, 0)
    if prev ~= 0 then return nil, 400, fmt("input '%s': %s[0] is %s, 0 expected", name, name, tostring(prev)) end
    for r = 1, n1 - 1 do
        local v = at(ptr, list, r)
        if v < prev then
            return nil, 400, fmt("input '%s': %s[%d] = %s is below %s[%d] = %s (offsets must not decrease)", name, name, r,
                                 tostring(v), name, r - 1, tostring(prev))
        end
        prev = v
    end
    if prev ~= nnz then
        return nil, 400, fmt("input '%s': %s[%d] = %s, but %s has %d elements", name, name, n1 - 1, tostring(prev), what_nnz, nnz)
    end
    return n1 - 1, ptr, list
end

local function too_many(n, max_rows)
    return nil, 413, fmt("too many rows: %d in one request (limit %d)", n, max_rows), { limit_rows = max_rows }
end

-- scratch arrays, grown as needed (one request at a time per worker: no yield in between)
local ids_buf, ids_cap = nil, 0
local c_add_csr = nil            -- wisp_batch_add_csr (engine/batch/oip.c), or false with an older libwisp
local added_box, bad_box = ffi.new("size_t[1]"), ffi.new("int64_t[1]")
local function add_csr_of(CL) return CL.wisp_batch_add_csr end
local function find_add_csr()
    local ok, fn = pcall(add_csr_of, lib())
    return ok and fn or false
end
local vals_buf, vals_cap = nil, 0

-- build_ids(req, e, b, max_rows) -> n, errs, bad | nil, status, message[, extra]
-- A model without columns: indptr (INT64|INT32 [n+1]), indices (INT32|INT64 [nnz]) and
-- optional values (FP32 [nnz]; without it every feature is binary, value 1) into the empty
-- growable batch b, one row per indptr range. A negative index makes its row bad (empty,
-- NaN); indices at or beyond the model's features are ignored when scored (as v1's and
-- libsvm's); a value that is not a finite float32 makes its row bad (the batch's rule).
function M.build_ids(req, e, b, max_rows)
    local CL = lib()
    local ins = req.inputs
    for _, name in ipairs(req.names) do
        if name ~= "indptr" and name ~= "indices" and name ~= "values" then
            return nil, 400, fmt("unknown input '%s': model '%s' takes indptr, indices and (optional) values", name, e.name)
        end
    end
    local tp, ti, tv = ins.indptr, ins.indices, ins.values
    if not tp or not ti then
        return nil, 400, fmt("model '%s' needs the inputs indptr (INT64 [rows + 1]) and indices (INT32 [nnz]); missing: %s",
                             e.name, not tp and "indptr" or "indices")
    end
    if ti.datatype ~= "INT32" and ti.datatype ~= "INT64" then
        return nil, 400, fmt("input 'indices': datatype INT32 or INT64 expected, got %s", ti.datatype)
    end
    if #ti.shape ~= 1 then return nil, 400, fmt("input 'indices': a 1-D tensor [nnz] expected, got shape %s", shape_text(ti.shape)) end
    local nnz = ti.count
    if tv then
        if tv.datatype ~= "FP32" then return nil, 400, fmt("input 'values': datatype FP32 expected, got %s", tv.datatype) end
        if #tv.shape ~= 1 then return nil, 400, fmt("input 'values': a 1-D tensor [nnz] expected, got shape %s", shape_text(tv.shape)) end
        if tv.count ~= nnz then
            return nil, 400, fmt("input 'values' has %d elements, 'indices' %d: one value per index expected", tv.count, nnz)
        end
    end
    local n, ipp, ipl = offsets(tp, nnz, "indices")
    if not n then return nil, ipp, ipl end
    if n == 0 then return nil, 400, "empty request: indptr [1] holds no rows" end
    if n > max_rows then return too_many(n, max_rows) end
    local h = b._h
    local iptr, ilist = ti.ptr, ti.list
    local vptr, vlist = tv and tv.ptr, tv and tv.list
    if vptr and tonumber(ffi.cast("uintptr_t", vptr)) % 4 ~= 0 then
        -- binary values at an offset that is not a multiple of 4 (the buffers follow the JSON
        -- header back to back): an aligned copy before C reads them as floats
        local al = scratch_buf("f", 0, nnz, f32_vla)
        ffi.copy(al, vptr, 4 * nnz)
        vptr = ffi.cast(PTYPE.FP32, al)
    end
    local errs, bad
    local done_c = false
    if c_add_csr == nil then c_add_csr = find_add_csr() end
    if c_add_csr and ipp and iptr and (vptr or not vlist) then
        -- typed tensors (binary, or JSON read by wisp_json_numbers): the rows added in C
        -- (engine/batch/oip.c), which stops at a row holding a negative id: that row is made bad here
        local ipb, idb = tp.datatype == "INT64" and 64 or 32, ti.datatype == "INT64" and 64 or 32
        local r = 0
        while r < n do
            local rc = c_add_csr(h, ipp, ipb, r, n, iptr, idb, vptr, added_box, bad_box)
            r = r + tonumber(added_box[0])
            if rc ~= 0 then
                local m = require("wisp").errmsg()
                return nil, rc == lib_K("WISP_ENOMEM") and 500 or 400, fmt("row %d: %s", r, tostring(m))
            end
            if r < n then
                local k = tonumber(bad_box[0])
                rc = CL.wisp_batch_add_row(h, nil, nil, 0)
                if rc ~= 0 then return nil, 500, fmt("row %d: %s", r, tostring(require("wisp").errmsg())) end
                errs, bad = errs or {}, bad or {}
                errs[#errs + 1] = { index = r, error = fmt("indices[%d] = %s: a feature id is a non-negative integer", k, tostring(tonumber(iptr[k]))) }
                bad[r] = true
                r = r + 1
            end
        end
        done_c = true
    end
    local start = at(ipp, ipl, 0)
    for r = done_c and n or 0, n - 1 do
        local z = at(ipp, ipl, r + 1)
        local len = z - start
        if len > ids_cap then
            ids_cap = len > 2 * ids_cap and len or 2 * ids_cap
            ids_buf = u64_vla(ids_cap)
            vals_buf = nil
        end
        local ids = ids_buf
        local badk, badv
        if iptr then
            for k = 0, len - 1 do
                local id = iptr[start + k]
                if id < 0 then badk, badv = start + k, id; break end
                ids[k] = id
            end
        else
            for k = 0, len - 1 do
                local id = ilist[start + k + 1]
                if id < 0 then badk, badv = start + k, id; break end
                ids[k] = id
            end
        end
        local rc
        if badk then
            rc = CL.wisp_batch_add_row(h, nil, nil, 0)
            errs, bad = errs or {}, bad or {}
            errs[#errs + 1] = { index = r, error = fmt("indices[%d] = %s: a feature id is a non-negative integer", badk, tostring(tonumber(badv))) }
            bad[r] = true
        elseif vptr then
            rc = CL.wisp_batch_add_row(h, ids, vptr + start, len)
        elseif vlist then
            if vals_buf == nil or vals_cap < ids_cap then vals_cap = ids_cap; vals_buf = f32_vla(vals_cap) end
            local vb = vals_buf
            for k = 0, len - 1 do vb[k] = vlist[start + k + 1] end
            rc = CL.wisp_batch_add_row(h, ids, vb, len)
        else
            rc = CL.wisp_batch_add_row(h, ids, nil, len)
        end
        if rc ~= 0 then
            local m = require("wisp").errmsg()
            return nil, rc == lib_K("WISP_ENOMEM") and 500 or 400, fmt("row %d: %s", r, tostring(m))
        end
        start = z
    end
    if b:bad_count() > 0 then
        for _, br in ipairs(b:bad_rows()) do
            if not (bad and bad[br.row]) then
                errs, bad = errs or {}, bad or {}
                errs[#errs + 1] = { index = br.row, error = br.msg }
                bad[br.row] = true
            end
        end
    end
    return n, errs, bad
end

-- the inputs of a model with columns, by name: {index, dtype ("float32"|"int64"|"string"), sparse}
local function input_table(e)
    local t = e.v2_inputs
    if t then return t end
    t = {}
    for i, inp in ipairs(e.inputs) do t[inp.name] = { index = i - 1, dtype = inp.dtype, sparse = inp.sparse, name = inp.name } end
    e.v2_inputs = t
    return t
end
M.input_table = input_table

local DT_OK = { float32 = { FP32 = true, FP64 = true }, int64 = { INT64 = true, INT32 = true }, string = { BYTES = true } }
local DT_WANT = { float32 = "FP32 (or FP64)", int64 = "INT64 (or INT32)", string = "BYTES" }
M.DT_WANT = DT_WANT

-- build_raw(req, e, max_rows) -> n, errs, bad | nil, status, message[, extra]
-- A model with feature columns: one tensor per input (named as in the description), into the
-- entry's raw batch e.tr (cleared first): shape [n] (one value a row), [n, k] (k values a row:
-- a sparse input's list; a dense input takes [n, 1]), or ragged: the values 1-D and an input
-- NAME_indptr (INT64|INT32 [n + 1]) giving each row's range (an empty range: missing, the
-- input's default). An input left out is missing in every row. The raw batch's own rules make
-- bad rows (a dense input given two values, a NaN, a bad UTF-8 string where one is checked).
function M.build_raw(req, e, max_rows)
    local CL = lib()
    local tr = e.tr
    local h = tr._h
    local inputs = input_table(e)
    local plan, ragged = {}, {}
    local n
    for _, name in ipairs(req.names) do
        local inp = inputs[name]
        if not inp then
            local base = name:match("^(.+)_indptr$")
            if base and inputs[base] then
                ragged[base] = req.inputs[name]
            else
                local list = {}
                for _, x in ipairs(e.inputs) do list[#list + 1] = x.name end
                return nil, 400, fmt("unknown input '%s': model '%s' takes %s (each optional; NAME_indptr makes NAME ragged)",
                                     name, e.name, concat(list, ", "))
            end
        end
    end
    for base in pairs(ragged) do
        if not req.inputs[base] then return nil, 400, fmt("input '%s_indptr' without the input '%s'", base, base) end
    end
    for _, name in ipairs(req.names) do
        local inp = inputs[name]
        if inp then
            local t = req.inputs[name]
            if not DT_OK[inp.dtype][t.datatype] then
                return nil, 400, fmt("input '%s' is %s: datatype %s expected, got %s", name, inp.dtype, DT_WANT[inp.dtype], t.datatype)
            end
            -- each row's range in the values: ragged (offsets ipp/ipl), else k values a row
            local rows, ipp, ipl, k
            local rt = ragged[name]
            if rt then
                if #t.shape ~= 1 then
                    return nil, 400, fmt("input '%s' is ragged (%s_indptr): its values are a 1-D tensor, got shape %s", name, name, shape_text(t.shape))
                end
                rows, ipp, ipl = offsets(rt, t.count, "'" .. name .. "'")
                if not rows then return nil, ipp, ipl end
                ipp = ipp or false
            elseif #t.shape == 1 then
                rows, k = t.count, 1
            elseif #t.shape == 2 then
                rows = t.shape[1]
                k = t.shape[2]
                if not inp.sparse and k ~= 1 then
                    return nil, 400, fmt("input '%s' is dense (one value a row): shape [rows] or [rows, 1] expected, got %s "
                        .. "(or ragged through %s_indptr)", name, shape_text(t.shape), name)
                end
            else
                return nil, 400, fmt("input '%s': shape [rows], [rows, k] or ragged (%s_indptr) expected, got %s", name, name, shape_text(t.shape))
            end
            if n == nil then n = rows
            elseif rows ~= n then
                return nil, 400, fmt("the inputs disagree on the number of rows: '%s' has %d, '%s' has %d", plan[1].name, n, name, rows)
            end
            plan[#plan + 1] = { name = name, index = inp.index, t = t, k = k, ipp = ipp, ipl = ipl,
                                str = inp.dtype == "string", int = inp.dtype == "int64" }
        end
    end
    if not n or n == 0 then return nil, 400, "empty request: the inputs hold no rows" end
    if n > max_rows then return too_many(n, max_rows) end
    tr:clear()
    local add_float, add_int, add_string = CL.wisp_raw_add_float, CL.wisp_raw_add_int, CL.wisp_raw_add_string
    for r = 0, n - 1 do
        local rc = CL.wisp_raw_row_begin(h, 0)
        if rc ~= 0 then return nil, 500, "raw batch: " .. tostring(require("wisp").errmsg()) end
        for p = 1, #plan do
            local pl = plan[p]
            local t, idx = pl.t, pl.index
            local a, len
            if pl.k then
                a, len = r * pl.k, pl.k
            else
                a = at(pl.ipp, pl.ipl, r)
                len = at(pl.ipp, pl.ipl, r + 1) - a
            end
            if pl.str then
                if t.offs then
                    local basep, offs, lens = t.base, t.offs, t.lens
                    for k = a + 1, a + len do
                        rc = add_string(h, idx, basep + offs[k], lens[k])
                        if rc ~= 0 then break end
                    end
                else
                    local list = t.list
                    for k = a + 1, a + len do
                        local s = list[k]
                        rc = add_string(h, idx, s, #s)
                        if rc ~= 0 then break end
                    end
                end
            elseif pl.int then
                local ptr, list = t.ptr, t.list
                for k = a, a + len - 1 do
                    rc = add_int(h, idx, ptr and ptr[k] or list[k + 1])
                    if rc ~= 0 then break end
                end
            else
                local ptr, list = t.ptr, t.list
                for k = a, a + len - 1 do
                    rc = add_float(h, idx, ptr and ptr[k] or list[k + 1])
                    if rc ~= 0 then break end
                end
            end
            if rc ~= 0 then return nil, 500, "raw batch: " .. tostring(require("wisp").errmsg()) end
        end
        rc = CL.wisp_raw_row_end(h)
        if rc ~= 0 then return nil, 500, "raw batch: " .. tostring(require("wisp").errmsg()) end
    end
    local errs, bad
    if tr:bad_count() > 0 then
        errs, bad = {}, {}
        for _, br in ipairs(tr:bad_rows()) do
            errs[#errs + 1] = { index = br.row, error = br.msg }
            bad[br.row] = true
        end
    end
    return n, errs, bad
end

return M
