-- raw.lua — wisp's raw batches (wisp_raw, wisp.h section 6): rows of raw column inputs for the
-- transform stage (Lua tables, TSV/CSV, JSON lines).
--
--   local fc = require "wisp.columns"
--   local r = assert(description:raw_batch())       -- a column description's raw batch
--   r:add { age = 37, city = "Paris" }
--   local b = r:transform()                          -- raw batch -> batch (the CPU transform)
--   session:score_raw(r)                             -- raw batch -> probabilities (fused on a GPU)
--
-- Made by description:raw_batch() (columns.lua; description:transformer() is its
-- deprecated alias, and wisp.columns.Transformer the class's old name).

local ffi = require "ffi"
local base = require "wisp.base"
local batch = require "wisp.batch"

local C = base.C
local ffi_new, ffi_gc, ffi_str, ffi_cast = ffi.new, ffi.gc, ffi.string, ffi.cast
local type, error, tostring, tonumber, pairs, next = type, error, tostring, tonumber, pairs, next
local setmetatable, getmetatable = setmetatable, getmetatable
local floor = math.floor
local concat = table.concat
local fmt, byte = string.format, string.byte
local argerror, last_error, handle = base.argerror, base.last_error, base.handle
local raw_box, size_box, u64_box = base.raw_box, base.size_box, base.u64_box
local Batch, new_batch = batch.Batch, batch.new

local INPUT_FLOAT32, INPUT_INT64 = base.K.WISP_INPUT_FLOAT32, base.K.WISP_INPUT_INT64
local int64_t     = ffi.typeof("int64_t")
local uint64_t    = ffi.typeof("uint64_t")

local RawBatch = {}
RawBatch.__index = RawBatch
base.register(RawBatch, "raw batch")

local M = { RawBatch = RawBatch }

-- raw.new(engine, description) -> a raw batch for the description's inputs, or nil, err
-- (description: a wisp.columns description, whose _h is its wisp_columns handle)
function M.new(e, desc, fname)
    local rc = C.wisp_raw_new(e._h, desc._h, raw_box)
    if rc ~= 0 then return nil, last_error(rc, fname or "raw_batch") end
    local h = ffi_gc(raw_box[0], C.wisp_raw_free)
    raw_box[0] = nil
    local index, dtypes = {}, {}
    for i = 0, tonumber(C.wisp_columns_num_inputs(desc._h)) - 1 do
        local name = ffi_str(C.wisp_columns_input_name(desc._h, i))
        index[name] = i
        dtypes[i] = C.wisp_columns_input_dtype(desc._h, i)
    end
    -- .spec: the description (its old name, kept for callers that read it)
    return setmetatable({ _h = h, description = desc, spec = desc, engine = e, _index = index, _dtype = dtypes,
                          _schema = nil }, RawBatch)
end

local null_ptr = ffi_cast("void *", 0)

local function add_value(h, idx, dtype, v, name)
    local t = type(v)
    if t == "string" then
        return C.wisp_raw_add_string(h, idx, v, #v)
    elseif t == "number" then
        if dtype == INPUT_INT64 and v == floor(v) and v >= -2^63 and v < 2^63 then
            return C.wisp_raw_add_int(h, idx, v)
        end
        return C.wisp_raw_add_float(h, idx, v)
    elseif t == "cdata" and (ffi.istype(int64_t, v) or ffi.istype(uint64_t, v)) then
        return C.wisp_raw_add_int(h, idx, v)
    end
    return C.wisp_raw_row_reject(h, fmt("input '%s': a %s is not a value", name, t))
end

-- Append one row (a table of input name -> value; a list for a sparse input;
-- nil or a JSON null for missing). Bad values make a bad row (its score is NaN),
-- listed by :bad_rows(). Returns true, or nil, err on a runtime failure.
function RawBatch:add(row, line)
    local h = handle(self, RawBatch, "raw batch", "add")
    if type(row) ~= "table" then argerror(1, 1, "add", "row table expected, got " .. type(row)) end
    local rc = C.wisp_raw_row_begin(h, line or 0)
    if rc ~= 0 then return nil, last_error(rc, "add") end
    local index, dtypes = self._index, self._dtype
    for k, v in pairs(row) do
        local idx = index[k]
        if idx == nil then
            rc = C.wisp_raw_row_reject(h, type(k) == "string" and fmt("unknown input '%s'", k)
                                          or fmt("row keys must be input names, not %s", type(k)))
        elseif type(v) == "table" then
            local n = #v
            if n == 0 and next(v) ~= nil then rc = C.wisp_raw_row_reject(h, fmt("input '%s': a table that is not a list", k)) end
            for i = 1, n do
                rc = add_value(h, idx, dtypes[idx], v[i], k)
                if rc ~= 0 then break end
            end
        elseif type(v) == "userdata" and ffi_cast("void *", v) == null_ptr then
            rc = 0                                                    -- JSON null: missing
        else
            rc = add_value(h, idx, dtypes[idx], v, k)
        end
        if rc ~= 0 then break end
    end
    local rc2 = C.wisp_raw_row_end(h)
    if rc ~= 0 then return nil, last_error(rc, "add") end
    if rc2 ~= 0 then return nil, last_error(rc2, "add") end
    return true
end

function RawBatch:add_rows(rows)
    handle(self, RawBatch, "raw batch", "add_rows")
    if type(rows) ~= "table" then argerror(1, 1, "add_rows", "a list of rows expected") end
    for i = 1, #rows do
        local ok, err = self:add(rows[i])
        if not ok then return nil, err end
    end
    return true
end

local function parse_text(self, fname, cfn, text, opts)
    local h = handle(self, RawBatch, "raw batch", fname)
    if type(text) ~= "string" then argerror(2, 1, fname, "string expected, got " .. type(text)) end
    opts = opts or {}
    if type(opts) ~= "table" then argerror(2, 2, fname, "options table expected") end
    u64_box[0] = opts.line or 0
    local final = opts.final == nil and 1 or (opts.final and 1 or 0)
    local rc = cfn(h, text, #text, final, opts.max_rows or 0, u64_box, size_box)
    local consumed, line = tonumber(size_box[0]), tonumber(u64_box[0])
    if rc ~= 0 then return nil, last_error(rc, fname) end
    return consumed, line
end

-- t:parse_tsv(text [, {schema="criteo"|"header"|"a,b,c", delim="\t"|",", final=true, line=0, max_rows=0}])
-- -> bytes consumed, lines so far; or nil, err. The schema is kept for later calls.
function RawBatch:parse_tsv(text, opts)
    local h = handle(self, RawBatch, "raw batch", "parse_tsv")
    opts = opts or {}
    local delim = opts.delim or "\t"
    if opts.schema or self._schema == nil then
        local schema = opts.schema or "criteo"
        if type(schema) == "table" then schema = concat(schema, ",") end
        if (delim ~= "\t" and delim ~= ",") then argerror(1, 2, "parse_tsv", "delim: '\\t' or ',' expected") end
        local rc = C.wisp_raw_set_schema(h, schema, byte(delim))
        if rc ~= 0 then return nil, last_error(rc, "parse_tsv") end
        self._schema = schema
    end
    return parse_text(self, "parse_tsv", C.wisp_raw_parse_tsv, text, opts)
end

-- t:parse_jsonl(text [, {final=true, line=0, max_rows=0}]) -> bytes consumed, lines; or nil, err
function RawBatch:parse_jsonl(text, opts)
    return parse_text(self, "parse_jsonl", C.wisp_raw_parse_jsonl, text, opts)
end

-- r:parse_jsonl_buf(text, len, max_rows[, final[, line]]) -> bytes consumed, lines; or
-- nil, err. parse_jsonl's hot-path form: text a Lua string or a `const char *` of len
-- bytes, positional arguments (final: default true; line: default 0), no options table.
function RawBatch:parse_jsonl_buf(text, len, max_rows, final, line)
    local h = handle(self, RawBatch, "raw batch", "parse_jsonl_buf")
    u64_box[0] = line or 0
    size_box[0] = 0
    local rc = C.wisp_raw_parse_jsonl(h, text, len, final == false and 0 or 1, max_rows or 0, u64_box, size_box)
    if rc ~= 0 then return nil, last_error(rc, "parse_jsonl") end
    return tonumber(size_box[0]), tonumber(u64_box[0])
end

-- A row from typed values, :add's hot-path form (the service's v2 tensors): r:row_begin([line]),
-- then for each value r:add_float(input, v), r:add_int(input, v) or r:add_string(input, s, len)
-- (input: the 0-based index of the description's input; s a Lua string or a pointer to len
-- bytes), then r:row_end(). A value the row refuses makes it a bad row, not a failure. Each
-- returns true, or nil, err on a runtime failure.
function RawBatch:row_begin(line)
    local rc = C.wisp_raw_row_begin(handle(self, RawBatch, "raw batch", "row_begin"), line or 0)
    if rc ~= 0 then return nil, last_error(rc, "row_begin") end
    return true
end
function RawBatch:add_float(input, v)
    local rc = C.wisp_raw_add_float(handle(self, RawBatch, "raw batch", "add_float"), input, v)
    if rc ~= 0 then return nil, last_error(rc, "add_float") end
    return true
end
function RawBatch:add_int(input, v)
    local rc = C.wisp_raw_add_int(handle(self, RawBatch, "raw batch", "add_int"), input, v)
    if rc ~= 0 then return nil, last_error(rc, "add_int") end
    return true
end
function RawBatch:add_string(input, s, len)
    local rc = C.wisp_raw_add_string(handle(self, RawBatch, "raw batch", "add_string"), input, s, len)
    if rc ~= 0 then return nil, last_error(rc, "add_string") end
    return true
end
function RawBatch:row_end()
    local rc = C.wisp_raw_row_end(handle(self, RawBatch, "raw batch", "row_end"))
    if rc ~= 0 then return nil, last_error(rc, "row_end") end
    return true
end

function RawBatch:bad_count() return tonumber(C.wisp_raw_bad_count(handle(self, RawBatch, "raw batch", "bad_count"))) end

function RawBatch:rows() return tonumber(C.wisp_raw_rows(handle(self, RawBatch, "raw batch", "rows"))) end

function RawBatch:bad_rows()
    return base.bad_rows(handle(self, RawBatch, "raw batch", "bad_rows"), C.wisp_raw_bad_count, C.wisp_raw_bad_row)
end

-- t:transform([batch]) -> the batch (a new one when none is given) with one
-- row appended per raw row; or nil, err. The raw rows stay until :clear().
function RawBatch:transform(batch)
    local h = handle(self, RawBatch, "raw batch", "transform")
    local err
    if batch == nil then
        batch, err = new_batch(self.engine)
        if not batch then return nil, err end
    elseif getmetatable(batch) ~= Batch or batch._h == nil then
        argerror(1, 1, "transform", "an open batch expected")
    end
    local rc = C.wisp_transform(h, batch._h)
    if rc ~= 0 then return nil, last_error(rc, "transform") end
    return batch
end

function RawBatch:clear() C.wisp_raw_clear(handle(self, RawBatch, "raw batch", "clear")) end

function RawBatch:close()
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_raw_free(h)
end

function RawBatch:is_closed() return self._h == nil end

-- Raw values of one input (tests, devices): { {v, ...} per row } as Lua values.
function RawBatch:input_values(name)
    local h = handle(self, RawBatch, "raw batch", "input_values")
    local idx = self._index[name]
    if idx == nil then argerror(1, 1, "input_values", "unknown input '" .. tostring(name) .. "'") end
    local rp, vals, so = base.u32p_box, base.voidp_box, base.u32p_box2
    C.wisp_raw_input(h, idx, rp, vals, so)
    local dt, out = self._dtype[idx], {}
    local f = ffi_cast("const float *", vals[0])
    local i64 = ffi_cast("const int64_t *", vals[0])
    local bytes = ffi_cast("const char *", vals[0])
    local dense = rp[0] == nil                    -- dense inputs: value r is row r's
    for r = 0, tonumber(C.wisp_raw_rows(h)) - 1 do
        local row = {}
        local a, z = r, r + 1
        if not dense then a, z = rp[0][r], rp[0][r + 1] end
        for k = a, z - 1 do
            if dt == INPUT_FLOAT32 then row[#row + 1] = f[k]
            elseif dt == INPUT_INT64 then row[#row + 1] = i64[k]
            else row[#row + 1] = ffi_str(bytes + so[0][k], so[0][k + 1] - so[0][k]) end
        end
        out[r + 1] = row
    end
    return out
end

return M
