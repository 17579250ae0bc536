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
    local text = type(body) == "string" and (jlen == #body and body or body:sub(1, jlen)) or ffi.string(base, jlen)
    local doc, jerr = S.cjson.decode(text)
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

-- element i (0-based) of a numeric tensor: a Lua number (INT64 binary: an int64 cdata)
local function getter(t)
    local ptr, list = t.ptr, t.list
    if ptr then return function(i) return ptr[i] end end
    return function(i) return list[i + 1] end
end

-- An offsets tensor (indptr, NAME_indptr): INT64 or INT32, 1-D, [rows + 1], starting at 0,
-- non-decreasing, ending at nnz. -> rows, get (0-based: a Lua number) | nil, status, message
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
    local g = getter(t)
    local prev = tonumber(g(0))
    if prev ~= 0 then return nil, 400, fmt("input '%s': %s[0] is %s, 0 expected", name, name, tostring(prev)) end
    for r = 1, n1 - 1 do
        local v = tonumber(g(r))
        if v < prev then
            return nil, 400, fmt("input '%s': %s[%d] = %s is below %s[%d] = %s (offsets must not decrease)", name, name, r,
                                 tostring(v), name, r - 1, tostring(prev))
        end
        prev = v
    end
    if prev ~= nnz then
        return nil, 400, fmt("input '%s': %s[%d] = %s, but %s has %d elements", name, name, n1 - 1, tostring(prev), what_nnz, nnz)
    end
    local ptr, list = t.ptr, t.list
    if ptr then return n1 - 1, function(i) return tonumber(ptr[i]) end end
    return n1 - 1, function(i) return list[i + 1] end
end

local function too_many(n, max_rows)
    return nil, 413, fmt("too many rows: %d in one request (limit %d)", n, max_rows), { limit_rows = max_rows }
end

-- scratch arrays, grown as needed (one request at a time per worker: no yield in between)
local ids_buf, ids_cap = nil, 0
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
    local n, ip, msg = offsets(tp, nnz, "indices")
    if not n then return nil, ip, msg end
    if n == 0 then return nil, 400, "empty request: indptr [1] holds no rows" end
    if n > max_rows then return too_many(n, max_rows) end
    local h = b._h
    local iptr, ilist = ti.ptr, ti.list
    local vptr, vlist = tv and tv.ptr, tv and tv.list
    local errs, bad
    local start = ip(0)
    for r = 0, n - 1 do
        local z = ip(r + 1)
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
            local rows, start_of, len_of
            local rt = ragged[name]
            if rt then
                if #t.shape ~= 1 then
                    return nil, 400, fmt("input '%s' is ragged (%s_indptr): its values are a 1-D tensor, got shape %s", name, name, shape_text(t.shape))
                end
                local ip, msg
                rows, ip, msg = offsets(rt, t.count, "'" .. name .. "'")
                if not rows then return nil, ip, msg end
                start_of = ip
                len_of = function(r) return ip(r + 1) - ip(r) end
            elseif #t.shape == 1 then
                rows = t.count
                start_of = function(r) return r end
                len_of = function() return 1 end
            elseif #t.shape == 2 then
                rows = t.shape[1]
                local k = t.shape[2]
                if not inp.sparse and k ~= 1 then
                    return nil, 400, fmt("input '%s' is dense (one value a row): shape [rows] or [rows, 1] expected, got %s "
                        .. "(or ragged through %s_indptr)", name, shape_text(t.shape), name)
                end
                start_of = function(r) return r * k end
                len_of = function() return k end
            else
                return nil, 400, fmt("input '%s': shape [rows], [rows, k] or ragged (%s_indptr) expected, got %s", name, name, shape_text(t.shape))
            end
            if n == nil then n = rows
            elseif rows ~= n then
                return nil, 400, fmt("the inputs disagree on the number of rows: '%s' has %d, '%s' has %d", plan[1].name, n, name, rows)
            end
            plan[#plan + 1] = { name = name, index = inp.index, t = t, start_of = start_of, len_of = len_of,
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
            local a, len = pl.start_of(r), pl.len_of(r)
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
