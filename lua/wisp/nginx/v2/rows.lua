-- wisp/nginx/v2/rows.lua — v2's decoded tensors made rows: a model without columns takes CSR tensors
-- (indptr, indices, values) through wisp_batch_from_csr, the one checked entry for CSR arrays (a
-- negative index or a value that is not a finite float32 makes a bad row, with the entry's message);
-- a model with feature columns one tensor per input of its description, into the entry's raw batch.
-- The offsets tensors (indptr, NAME_indptr) are the protocol's shape: [rows + 1] from 0 to the
-- values' count, never decreasing, or the request is refused.

local S = require "wisp.nginx.state"
local B = require "wisp.nginx.v2.binary"
local DATA = require "wisp.nginx.v2.data"
local RUN = require "wisp.nginx.run"

local tostring, tonumber, pairs, ipairs = tostring, tonumber, pairs, ipairs
local fmt, concat = string.format, table.concat
local shape_text, scratch_buf, VLA = B.shape_text, DATA.scratch_buf, DATA.VLA
local bad_rows_of = RUN.bad_rows_of

local M = {}

local K
local function csr_type(dt)
    if not K then K = require("wisp.const") end
    return dt == "INT64" and K.WISP_CSR_INT64 or K.WISP_CSR_INT32
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
            return nil, 400, fmt("input '%s': %s[%d] = %s is below %s[%d] = %s (offsets must not decrease)",
                                 name, name, r,
                                 tostring(v), name, r - 1, tostring(prev))
        end
        prev = v
    end
    if prev ~= nnz then
        return nil, 400, fmt("input '%s': %s[%d] = %s, but %s has %d elements", name, name, n1 - 1, tostring(prev),
            what_nnz, nnz)
    end
    return n1 - 1, ptr, list
end

local function too_many(n, max_rows)
    return nil, 413, fmt("too many rows: %d in one request (limit %d)", n, max_rows), { limit_rows = max_rows }
end

-- build_ids(sc, req, e, max_rows) -> n, batch, errs, bad | nil, status, message[, extra]
-- A model without columns: indptr (INT64|INT32 [n+1]), indices (INT32|INT64 [nnz]) and optional
-- values (FP32 [nnz]; without it every feature is binary, value 1), one row per indptr range, in a
-- batch of their own (wisp_batch_from_csr: typed tensors are used in place, JSON lists cjson read
-- are copied into the request's scratch set sc first). Indices at or beyond the model's features
-- are ignored when scored (as v1's and libsvm's).
function M.build_ids(sc, req, e, max_rows)
    local ins = req.inputs
    for _, name in ipairs(req.names) do
        if name ~= "indptr" and name ~= "indices" and name ~= "values" then
            return nil, 400, fmt("unknown input '%s': model '%s' takes indptr, indices and (optional) values", name,
                e.name)
        end
    end
    local tp, ti, tv = ins.indptr, ins.indices, ins.values
    if not tp or not ti then
        return nil, 400,
            fmt("model '%s' needs the inputs indptr (INT64 [rows + 1]) and indices (INT32 [nnz]); missing: %s",
                             e.name, not tp and "indptr" or "indices")
    end
    if ti.datatype ~= "INT32" and ti.datatype ~= "INT64" then
        return nil, 400, fmt("input 'indices': datatype INT32 or INT64 expected, got %s", ti.datatype)
    end
    if #ti.shape ~= 1 then return nil, 400, fmt("input 'indices': a 1-D tensor [nnz] expected, got shape %s",
        shape_text(ti.shape)) end
    local nnz = ti.count
    if tv then
        if tv.datatype ~= "FP32" then return nil, 400, fmt("input 'values': datatype FP32 expected, got %s",
            tv.datatype) end
        if #tv.shape ~= 1 then return nil, 400, fmt("input 'values': a 1-D tensor [nnz] expected, got shape %s",
            shape_text(tv.shape)) end
        if tv.count ~= nnz then
            return nil, 400, fmt("input 'values' has %d elements, 'indices' %d: one value per index expected", tv.count,
                nnz)
        end
    end
    local n, ipp, ipl = offsets(tp, nnz, "indices")
    if not n then return nil, ipp, ipl end
    if n == 0 then return nil, 400, "empty request: indptr [1] holds no rows" end
    if n > max_rows then return too_many(n, max_rows) end
    local ip_type, id_type = csr_type(tp.datatype), csr_type(ti.datatype)
    if not ipp then                                  -- JSON lists cjson read: into int64 / float arrays
        local a = scratch_buf(sc, "i64", -1, n + 1, VLA.i64)
        for k = 0, n do a[k] = ipl[k + 1] end
        ipp, ip_type = a, csr_type("INT64")
    end
    local iptr = ti.ptr
    if not iptr then
        local a, list = scratch_buf(sc, "i64", -2, nnz, VLA.i64), ti.list
        for k = 0, nnz - 1 do a[k] = list[k + 1] end
        iptr, id_type = a, csr_type("INT64")
    end
    local vptr = tv and tv.ptr
    if tv and not vptr then
        local a, list = scratch_buf(sc, "f", -3, nnz, VLA.f), tv.list
        for k = 0, nnz - 1 do a[k] = list[k + 1] end
        vptr = a
    end
    local vtype = vptr and K.WISP_CSR_FLOAT32 or 0
    local b, err = S.engine:batch_from_csr(n, ipp, ip_type, iptr, id_type, nnz, vptr, vtype, 0)
    if not b then return nil, tostring(err):find("out of memory", 1, true) and 500 or 400, tostring(err) end
    local errs, bad = bad_rows_of(b, false)
    return n, b, errs, bad
end

-- the inputs of a model with columns, by name: {index, dtype ("float32"|"int64"|"string"), sparse}
local function input_table(e)
    local t = e.v2_inputs
    if t then return t end
    t = {}
    for i, inp in ipairs(e.inputs) do t[inp.name] = { index = i - 1, dtype = inp.dtype, sparse = inp.sparse,
        name = inp.name } end
    e.v2_inputs = t
    return t
end
M.input_table = input_table

local DT_OK = { float32 = { FP32 = true, FP64 = true }, int64 = { INT64 = true, INT32 = true },
    string = { BYTES = true } }
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
    local tr = e.tr
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
                return nil, 400,
                    fmt("unknown input '%s': model '%s' takes %s (each optional; NAME_indptr makes NAME ragged)",
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
                return nil, 400, fmt("input '%s' is %s: datatype %s expected, got %s", name, inp.dtype,
                    DT_WANT[inp.dtype], t.datatype)
            end
            -- each row's range in the values: ragged (offsets ipp/ipl), else k values a row
            local rows, ipp, ipl, k
            local rt = ragged[name]
            if rt then
                if #t.shape ~= 1 then
                    return nil, 400, fmt("input '%s' is ragged (%s_indptr): its values are a 1-D tensor, got shape %s",
                        name, name, shape_text(t.shape))
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
                    return nil, 400,
                        fmt("input '%s' is dense (one value a row): shape [rows] or [rows, 1] expected, got %s "
                        .. "(or ragged through %s_indptr)", name, shape_text(t.shape), name)
                end
            else
                return nil, 400, fmt("input '%s': shape [rows], [rows, k] or ragged (%s_indptr) expected, got %s", name,
                    name, shape_text(t.shape))
            end
            if n == nil then n = rows
            elseif rows ~= n then
                return nil, 400, fmt("the inputs disagree on the number of rows: '%s' has %d, '%s' has %d",
                    plan[1].name, n, name, rows)
            end
            plan[#plan + 1] = { name = name, index = inp.index, t = t, k = k, ipp = ipp, ipl = ipl,
                                str = inp.dtype == "string", int = inp.dtype == "int64" }
        end
    end
    if not n or n == 0 then return nil, 400, "empty request: the inputs hold no rows" end
    if n > max_rows then return too_many(n, max_rows) end
    tr:clear()
    for r = 0, n - 1 do
        local ok, err = tr:row_begin(0)
        for p = 1, #plan do
            if not ok then break end
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
                        ok, err = tr:add_string(idx, basep + offs[k], lens[k])
                        if not ok then break end
                    end
                else
                    local list = t.list
                    for k = a + 1, a + len do
                        local s = list[k]
                        ok, err = tr:add_string(idx, s, #s)
                        if not ok then break end
                    end
                end
            else
                local ptr, list, add = t.ptr, t.list, pl.int and tr.add_int or tr.add_float
                for k = a, a + len - 1 do
                    ok, err = add(tr, idx, ptr and ptr[k] or list[k + 1])
                    if not ok then break end
                end
            end
        end
        if ok then ok, err = tr:row_end() end
        if not ok then return nil, 500, "raw batch: " .. tostring(err) end
    end
    local errs, bad = bad_rows_of(tr, false)
    return n, errs, bad
end

return M
