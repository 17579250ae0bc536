-- wisp/nginx/v2/binary.lua — v2's binary tensor data extension: the Inference-Header-Content-Length
-- header, an input's raw little-endian buffer read in place (nginx's body buffer lives until the
-- request ends: no copy), BYTES elements (a 4-byte length before each), and the binary outputs.

local ffi = require "ffi"

local type, tonumber = type, tonumber
local fmt, floor = string.format, math.floor
local concat = table.concat

local M = {}

-- the datatypes wisp reads, their element sizes, and the pointer types of their buffers
local ESIZE = { INT32 = 4, INT64 = 8, FP32 = 4, FP64 = 8 }
M.ESIZE = ESIZE
local PTYPE = { INT32 = ffi.typeof("const int32_t *"), INT64 = ffi.typeof("const int64_t *"),
                FP32 = ffi.typeof("const float *"), FP64 = ffi.typeof("const double *") }
local charp = ffi.typeof("const char *")
local f32arr, i64arr = ffi.typeof("float[?]"), ffi.typeof("int64_t[?]")

local function shape_text(shape) return "[" .. concat(shape, ", ") .. "]" end
M.shape_text = shape_text

-- header_length(hlen_text, blen) -> the JSON header's length (nil: no header) | false, message
function M.header_length(hlen_text, blen)
    if hlen_text == nil then return nil end
    if type(hlen_text) == "table" then return false, "Inference-Header-Content-Length given more than once" end
    local hlen = tonumber(hlen_text)
    if not hlen or hlen ~= floor(hlen) or hlen <= 0 or not hlen_text:match("^%s*%d+%s*$") then
        return false, "Inference-Header-Content-Length: a positive integer expected, got '"
            .. hlen_text:sub(1, 40) .. "'"
    end
    if hlen > blen then
        return false, fmt("Inference-Header-Content-Length %d is longer than the body (%d bytes)", hlen, blen)
    end
    return hlen
end

-- BYTES elements of a binary buffer: 4-byte little-endian lengths, each followed by its bytes.
-- -> offsets, lengths (Lua lists, 0-based into base) | nil, message
local function bytes_elements(name, base, off, size, count)
    local offs, lens = {}, {}
    local p, z = off, off + size
    for i = 1, count do
        if p + 4 > z then
            return nil, fmt("input '%s' (BYTES): binary data of %d bytes ends inside element %d's length "
                            .. "(shape holds %d elements)",
                            name, size, i - 1, count)
        end
        local len = base[p] + base[p + 1] * 256 + base[p + 2] * 65536 + base[p + 3] * 16777216
        p = p + 4
        if p + len > z then
            return nil, fmt("input '%s' (BYTES): element %d's length %d runs past the tensor's %d bytes", name, i - 1,
                            len, size)
        end
        offs[i], lens[i] = p, len
        p = p + len
    end
    if p ~= z then
        return nil, fmt("input '%s' (BYTES): %d elements take %d bytes, binary_data_size says %d", name, count,
                        p - off, size)
    end
    return offs, lens
end

-- read_input(tensor, base, off, bsize) -> true | nil, message: the tensor's bsize bytes at base + off
-- (its datatype, shape and count checked by the decoder) set as tensor.ptr (a typed pointer into
-- the body, unaligned allowed), or for BYTES tensor.base, .offs, .lens
function M.read_input(tensor, base, off, bsize)
    local name, dt = tensor.name, tensor.datatype
    if dt == "BYTES" then
        local offs, lens = bytes_elements(name, base, off, bsize, tensor.count)
        if not offs then return nil, lens end
        tensor.base, tensor.offs, tensor.lens = ffi.cast(charp, base), offs, lens
        return true
    end
    if bsize ~= tensor.count * ESIZE[dt] then
        return nil, fmt("input '%s': shape %s of %s is %d bytes, binary_data_size says %d", name,
                        shape_text(tensor.shape), dt, tensor.count * ESIZE[dt], bsize)
    end
    tensor.ptr = ffi.cast(PTYPE[dt], base + off)
    return true
end

-- the outputs' bytes: n probabilities as FP32 (NaN for the rows in bad), the bad rows as INT64
local NAN = 0 / 0
local bin_f, bin_f_cap = nil, 0
function M.probabilities(out, n, bad)
    if n > bin_f_cap then bin_f_cap = n > 2 * bin_f_cap and n or 2 * bin_f_cap; bin_f = f32arr(bin_f_cap) end
    ffi.copy(bin_f, out, 4 * n)
    if bad then for i = 0, n - 1 do if bad[i] then bin_f[i] = NAN end end end
    return ffi.string(bin_f, 4 * n)
end
function M.indices(list)
    local k = #list
    local a = i64arr(k > 0 and k or 1)
    for i = 1, k do a[i - 1] = list[i] end
    return ffi.string(a, 8 * k)
end

return M
