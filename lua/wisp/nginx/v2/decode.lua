-- wisp/nginx/v2/decode.lua — v2's infer request decoded: its JSON (inputs, requested outputs,
-- parameters, id; the tensors' "data" read in place by wisp.nginx.v2.data, binary tensors by
-- wisp.nginx.v2.binary), every check of shapes, datatypes and sizes (a protocol error: nil, status,
-- message), and the tensors made rows (wisp.nginx.v2.rows): the decode of v2 as a protocol of
-- wisp.nginx.run.
--
-- No library is touched at require time (the routes are loaded in nginx's master).

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local J = require "wisp.nginx.json"
local B = require "wisp.nginx.v2.binary"
local DATA = require "wisp.nginx.v2.data"
local ROWS = require "wisp.nginx.v2.rows"

local type, tostring, ipairs, pairs, next = type, tostring, ipairs, pairs, next
local fmt, floor = string.format, math.floor
local is_list, is_object, what = J.is_list, J.is_object, J.what
local ESIZE, shape_text, header_length, read_input = B.ESIZE, B.shape_text, B.header_length, B.read_input
local scan_json, read_flat_spans, span_data = DATA.scan_json, DATA.read_flat_spans, DATA.span_data
local take_scratch, give_scratch = DATA.take_scratch, DATA.give_scratch

local M = {}

local KNOWN = { BOOL = true, UINT8 = true, UINT16 = true, UINT32 = true, UINT64 = true, INT8 = true, INT16 = true,
                INT32 = true, INT64 = true, FP16 = true, FP32 = true, FP64 = true, BYTES = true, BF16 = true }
local u8p = ffi.typeof("const uint8_t *")

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
                return nil,
                    fmt("input '%s' (INT64): data[%d] = %s: a JSON integer at or beyond 2^53 is not read exactly "
                    .. "here (JSON numbers are doubles); send this tensor in the binary tensor data extension", name,
                        i - 1, what(v))
            end
        end
    end
    return true
end

-- decode_request(sc, body, blen, hlen_text) -> req | nil, status, message
-- body: a Lua string or a pointer to blen bytes (nginx's buffer: it lives until the request
-- ends); hlen_text: the Inference-Header-Content-Length header's value (string) or nil; sc: the
-- request's scratch set (wisp.nginx.v2.data), which the typed data may point into.
-- req = { id =, parameters = (table or nil), inputs = {name -> tensor}, names = {in order},
--         outputs = nil | list of {name =, binary = true|false|nil}, binary_output = bool }
-- tensor = { name, datatype, shape = {...}, count, parameters, and either list (JSON: the
--            flattened data) or ptr (binary: typed pointer to count elements; BYTES: base, offs, lens) }
local function decode_request(sc, body, blen, hlen_text)
    local base = ffi.cast(u8p, body)
    local hlen, herr = header_length(hlen_text, blen)
    if hlen == false then return nil, 400, herr end
    local jlen = hlen or blen
    local text, spans = scan_json(sc, base, jlen)
    local doc, jerr
    if text then
        doc, jerr = S.cjson.decode(text)
        if doc ~= nil and spans then
            read_flat_spans(sc, spans, doc)
            for _, sp in pairs(spans) do
                -- [1, null]: cjson reads it all, and says what is wrong
                if sp.invalid then spans = nil; break end
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
            .. (hlen == nil and blen > 0 and text:find("%z")
                and " (binary data without Inference-Header-Content-Length?)" or "")
    end
    if not is_object(doc) or next(doc) == nil then
        return nil, 400, 'an inference request object {"inputs": [...]} expected, got ' .. what(doc)
    end
    local req = { inputs = {}, names = {} }
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
                if not is_object(op) then return nil, 400, fmt("output '%s': \"parameters\": an object expected",
                    o.name) end
                if op.binary_data ~= nil then
                    if type(op.binary_data) ~= "boolean" then
                        return nil, 400, fmt("output '%s': \"binary_data\": true or false expected, got %s", o.name,
                            what(op.binary_data))
                    end
                    bin = op.binary_data
                end
                if op.class_count ~= nil and op.class_count ~= 0 then
                    return nil, 400, fmt("output '%s': class_count: the classification extension is not supported",
                        o.name)
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
        if not is_object(t) then return nil, 400, fmt('"inputs"[%d]: a tensor object expected, got %s', i - 1,
            what(t)) end
        local name = t.name
        if type(name) ~= "string" or name == "" then
            return nil, 400, fmt('"inputs"[%d]: "name": a non-empty string expected, got %s', i - 1, what(name))
        end
        if req.inputs[name] then return nil, 400, fmt("input '%s' given twice", name) end
        local dt = t.datatype
        if type(dt) ~= "string" then return nil, 400, fmt("input '%s': \"datatype\": a string expected, got %s", name,
            what(dt)) end
        if not KNOWN[dt] then return nil, 400, fmt("input '%s': unknown datatype '%s'", name, dt:sub(1, 40)) end
        if not (ESIZE[dt] or dt == "BYTES") then
            return nil, 400, fmt("input '%s': datatype %s is not one wisp reads (INT32, INT64, FP32, FP64, BYTES)",
                name, dt)
        end
        local shape = t.shape
        if not is_list(shape) then return nil, 400, fmt("input '%s': \"shape\": a list of dimensions expected, got %s",
            name, what(shape)) end
        local count = 1
        for k = 1, #shape do
            local d = shape[k]
            if type(d) ~= "number" or d ~= floor(d) or d < 0 or d > 2147483647 then
                return nil, 400, fmt("input '%s': shape[%d] is %s, a non-negative integer expected", name, k - 1,
                    what(d))
            end
            count = count * d
        end
        if count > 2 ^ 40 then return nil, 400, fmt("input '%s': shape %s holds too many elements", name,
            shape_text(shape)) end
        local tp = t.parameters
        if tp ~= nil and not is_object(tp) then return nil, 400, fmt("input '%s': \"parameters\": an object expected",
            name) end
        local tensor = { name = name, datatype = dt, shape = shape, count = count, parameters = tp }
        local bsize = tp and tp.binary_data_size
        if bsize ~= nil then
            if type(bsize) ~= "number" or bsize ~= floor(bsize) or bsize < 0 then
                return nil, 400, fmt("input '%s': binary_data_size: a non-negative integer expected, got %s", name,
                    what(bsize))
            end
            if not hlen then
                return nil, 400,
                    fmt("input '%s' has binary_data_size but the request has no Inference-Header-Content-Length header",
                    name)
            end
            if t.data ~= nil then return nil, 400, fmt("input '%s': both \"data\" and binary_data_size", name) end
            if off + bsize > blen then
                return nil, 400,
                    fmt("input '%s': binary_data_size %d runs past the body (%d bytes of binary data left)", name,
                    bsize, blen - off)
            end
            local ok, berr = read_input(tensor, base, off, bsize)
            if not ok then return nil, 400, berr end
            off = off + bsize
        elseif spans and spans[i - 1] and type(t.data) == "table" and next(t.data) == nil then
            -- the numbers scan_json read in place
            local sp = spans[i - 1]
            if sp.count ~= count then
                return nil, 400, fmt("input '%s': shape %s holds %d elements, \"data\" has %d", name, shape_text(shape),
                    count, sp.count)
            end
            local ptr, err, list = span_data(sc, name, dt, sp)
            if list then tensor.list = list
            elseif not ptr then return nil, 400, err
            else tensor.ptr = ptr end
        else
            local data = t.data
            if data == nil then return nil, 400, fmt("input '%s': no \"data\" (and no binary_data_size)", name) end
            if not is_list(data) then return nil, 400, fmt("input '%s': \"data\": a list expected, got %s", name,
                what(data)) end
            local flat = data
            if type(data[1]) == "table" then
                flat = flatten(data, {}, 0)
                if not flat then return nil, 400, fmt("input '%s': \"data\": nested lists of values expected", name) end
            end
            if #flat ~= count then
                return nil, 400, fmt("input '%s': shape %s holds %d elements, \"data\" has %d", name, shape_text(shape),
                    count, #flat)
            end
            local ok, err = check_json_data(name, dt, flat)
            if not ok then return nil, 400, err end
            tensor.list = flat
        end
        req.inputs[name] = tensor
        req.names[#req.names + 1] = name
    end
    if hlen and off ~= blen then
        return nil, 400,
            fmt("the body has %d bytes of binary data after the %d-byte header; the inputs' binary_data_size add "
            .. "up to %d",
                             blen - hlen, hlen, off - hlen)
    end
    return req
end


-- decode(e, b, body, blen, hlen_text, max_rows) -> d | nil, status, message[, extra] (wisp.nginx.run's
-- protocol decode): d.req (the decoded request, for the answer), d.scratch (its buffers, given back
-- by M.finish), and the rows: a batch of their own (a model without columns) or e.tr (raw, with
-- columns: b then takes them if the mode needs feature ids).
function M.decode(e, b, body, blen, hlen_text, max_rows)
    local sc = take_scratch()
    local req, st, msg = decode_request(sc, body, blen, hlen_text)
    if req and req.outputs then
        for _, o in ipairs(req.outputs) do
            if o.name ~= "probability" and o.name ~= "bad_rows" then
                req, st, msg = nil, 400,
                    fmt("unknown output '%s' (model '%s' has the outputs probability and bad_rows)",
                                             o.name, e.name)
                break
            end
        end
    end
    if not req then give_scratch(sc); return nil, st, msg end
    local d = { req = req, scratch = sc, b = b }
    local n, rb, errs, bad, extra
    if e.tr then
        n, errs, bad, extra = ROWS.build_raw(req, e, max_rows)
        d.raw = true
    else
        n, rb, errs, bad, extra = ROWS.build_ids(sc, req, e, max_rows)
        if n then d.b = rb else errs, bad = rb, errs end
    end
    if not n then give_scratch(sc); return nil, errs, bad, extra end
    d.n, d.errs, d.bad = n, errs, bad
    return d
end

-- the request done: its scratch set given back
function M.finish(d) give_scratch(d.scratch) end

return M
