-- batch.lua — wisp's batches (wisp.h section 4): rows of ids and values, built from Lua,
-- parsed from libsvm text, or wrapped over FFI arrays.
--
-- Loaded by `require "wisp"` (init.lua): wisp.batch, wisp.batch_wrap (alias: the
-- deprecated wisp.batch_from_ffi), wisp.batch_from_rows, the same on an engine, and
-- the Batch class. Ids are the model's 0-based feature ids; reported rows are 0-based.

local ffi = require "ffi"
local base = require "wisp.base"
local engine = require "wisp.engine"

local C, wisp = base.C, base.wisp
local ffi_gc, ffi_str, ffi_cast, ffi_istype = ffi.gc, ffi.string, ffi.cast, ffi.istype
local type, tonumber, tostring, setmetatable, getmetatable = type, tonumber, tostring, setmetatable, getmetatable
local floor, max = math.floor, math.max
local fmt = string.format
local argerror, expected, handle, check_uint = base.argerror, base.expected, base.handle, base.check_uint
local ffi_elems, need, typename, last_error = base.ffi_elems, base.need, base.typename, base.last_error
local batch_box, size_box, u64_box = base.batch_box, base.size_box, base.u64_box
local uint64_vla, float_vla, const_char_ptr = base.uint64_vla, base.float_vla, base.const_char_ptr
local u32p_probe, f32p_probe = base.u32p_probe, base.f32p_probe
local Engine, resolve_engine = engine.Engine, engine.resolve

local Batch = {}; Batch.__index = Batch
wisp.Batch = Batch
base.register(Batch, "batch")

local M = { Batch = Batch }

local function new_batch_object(h, e, wrapped)
    return setmetatable({
        _h = h, engine = e, _wrapped = wrapped,
        _ids = nil, _idcap = 0,       -- uint64_t scratch
        _vals = nil, _valcap = 0,     -- float scratch
        _refs = nil,                  -- a zero-copy batch's arrays, kept alive
    }, Batch)
end

local function new_batch(e)
    local rc = C.wisp_batch_new(e._h, batch_box)
    if rc ~= 0 then return nil, last_error(rc, "batch") end
    local h = ffi_gc(batch_box[0], base.batch_gc)
    batch_box[0] = nil
    return new_batch_object(h, e, false)
end

-- wisp.batch([engine]) -> an empty growable batch
function wisp.batch(eng)
    local e, err = resolve_engine(1, 1, "batch", eng)
    if not e then return nil, err end
    local b, berr = new_batch(e)
    return b, berr
end

function Engine:batch()
    handle(self, Engine, "engine", "batch")
    local b, err = new_batch(self)
    return b, err
end

local function id_scratch(self, n)
    if n > self._idcap or self._ids == nil then
        local cap = max(n, self._idcap * 2, 64)
        self._ids = uint64_vla(cap)
        self._idcap = cap
    end
    return self._ids
end

local function val_scratch(self, n)
    if n > self._valcap or self._vals == nil then
        local cap = max(n, self._valcap * 2, 64)
        self._vals = float_vla(cap)
        self._valcap = cap
    end
    return self._vals
end

-- Copy Lua ids[1..n] into dst[off..off+n): non-negative integers (numbers
-- below 2^64, or 64-bit integer cdata). `where` prefixes messages ("row 3: ").
local function fill_ids(depth, argn, fname, where, dst, off, ids, n)
    for i = 1, n do
        local id = ids[i]
        if type(id) == "number" then
            if not (id >= 0 and id < 18446744073709551616) or id ~= floor(id) then
                argerror(depth + 1, argn, fname,
                         fmt("%sid #%d: non-negative integer expected, got %s", where, i, tostring(id)))
            end
        elseif type(id) ~= "cdata" then
            argerror(depth + 1, argn, fname, fmt("%sid #%d: integer expected, got %s", where, i, typename(id)))
        end
        dst[off + i - 1] = id
    end
end

-- Doubles at or beyond this magnitude round to an infinite float32 (halfway
-- between FLT_MAX and 2^128, which round-to-nearest-even sends up).
local F32_OVERFLOW = 2 ^ 128 - 2 ^ 103

-- Copy Lua vals[1..n] into dst[0..n). Returns the position (1-based) of the
-- first value that is not a finite float32 (NaN, +-inf, 1e39), or nil: such
-- a value makes the row bad (the values rule, wisp.h), it is not a caller
-- mistake; a value that is not a number is.
local function fill_vals(depth, argn, fname, where, dst, vals, n)
    local bad
    for i = 1, n do
        local v = vals[i]
        if type(v) ~= "number" then
            argerror(depth + 1, argn, fname, fmt("%svalue #%d: number expected, got %s", where, i, typename(v)))
        end
        if not (v > -F32_OVERFLOW and v < F32_OVERFLOW) and not bad then bad = i end
        dst[i - 1] = v
    end
    return bad
end

-- The reason a row is bad for its value #k (ids[k], value v).
local function value_reason(k, id, v)
    return fmt("feature #%d (id %s): value %s is not a finite float32", k, tostring(id), tostring(v))
end

-- A batch submitted to a session and not yet returned by its wait belongs
-- to wisp (wisp.h): changing or freeing it is a caller mistake (on a GPU the
-- device may still be reading it: a use after free).
local function not_in_flight(self, fname)
    if self._inflight then
        error(fmt("calling '%s' on a batch that is submitted and not yet waited for (call session:wait() first)",
                  fname), 3)
    end
end

local function growable(self, fname)
    local h = handle(self, Batch, "batch", fname)
    if self._wrapped then
        error(fmt("calling '%s' on a zero-copy batch (it cannot grow)", fname), 3)
    end
    if self._inflight then not_in_flight(self, fname) end
    return h
end

-- Append a row: ids (valued when vals is given), plus binary bids (mixed).
-- a1..a3: the argument numbers of ids, vals, bids for messages.
local function add_row(depth, fname, where, self, h, ids, vals, bids, a1, a2, a3)
    if type(ids) ~= "table" then
        argerror(depth + 1, a1, fname, fmt("%stable expected, got %s", where, typename(ids)))
    end
    if vals ~= nil and type(vals) ~= "table" then
        argerror(depth + 1, a2, fname, fmt("%stable expected, got %s", where, typename(vals)))
    end
    if bids ~= nil and type(bids) ~= "table" then
        argerror(depth + 1, a3, fname, fmt("%stable expected, got %s", where, typename(bids)))
    end
    local n = #ids
    if vals ~= nil and #vals ~= n then
        argerror(depth + 1, a2, fname, fmt("%s%d values for %d ids", where, #vals, n))
    end
    local rc, bad
    if bids == nil then
        local ip = id_scratch(self, n)
        fill_ids(depth + 1, a1, fname, where, ip, 0, ids, n)
        local vp = nil
        if vals ~= nil then
            vp = val_scratch(self, n)
            bad = fill_vals(depth + 1, a2, fname, where, vp, vals, n)
        end
        rc = C.wisp_batch_add_row(h, ip, vp, n)
    else
        local nb = #bids
        local ip = id_scratch(self, n + nb)
        fill_ids(depth + 1, a1, fname, where, ip, 0, ids, n)
        fill_ids(depth + 1, a3, fname, where, ip, n, bids, nb)
        local vp = val_scratch(self, n)
        if vals ~= nil then bad = fill_vals(depth + 1, a2, fname, where, vp, vals, n) end
        rc = C.wisp_batch_add_row_mixed(h, ip, vp, n, ip + n, nb)
    end
    -- a value beyond float32 (or NaN/inf): C added the row empty, as a bad
    -- row (its float is inf or NaN there); the reason names the Lua number
    if bad and rc == 0 then return rc, value_reason(bad, ids[bad], vals[bad]) end
    return rc
end

-- batch:add(ids[, vals]): append one row. ids: a Lua array of 0-based
-- feature ids; vals: nil (every feature binary, value 1) or an array of
-- #ids numbers. Returns true when a row was added; or nil, err (a limit,
-- out of memory) with the batch unchanged. A value that is not a finite
-- float32 (NaN, +-inf, 1e39: the values rule of wisp.h) is data, not a
-- caller mistake: the row is added as a bad row (scored NaN, listed by
-- bad_rows) and add returns true, reason ("feature #2 (id 9): value 1e+39
-- is not a finite float32"), so row indices stay aligned with the caller's.
function Batch:add(ids, vals)
    local h = growable(self, "add")
    local rc, reason = add_row(1, "add", "", self, h, ids, vals, nil, 1, 2, 3)
    if rc ~= 0 then return nil, last_error(rc, "add") end
    return true, reason
end

-- batch:add_mixed(vids, vals, bids): one row with valued features vids
-- (values vals) and binary features bids.
function Batch:add_mixed(vids, vals, bids)
    local h = growable(self, "add_mixed")
    if vals == nil then expected(1, 2, "add_mixed", "table", vals) end
    if bids == nil then expected(1, 3, "add_mixed", "table", bids) end
    local rc, reason = add_row(1, "add_mixed", "", self, h, vids, vals, bids, 1, 2, 3)
    if rc ~= 0 then return nil, last_error(rc, "add_mixed") end
    return true, reason
end

-- The text arguments of the parse_* methods of fname, from argument #n on:
-- (text[, opts]) for a Lua string, (ptr, len[, opts]) for FFI memory; opts =
-- {final = bool, max_rows = N, line = N}. Returns the text as the C call
-- takes it, its length, final (1/0) and max_rows, and leaves the starting
-- line count in u64_box[0] and 0 in size_box[0] for the call.
local function text_args(fname, n, text, a, b)
    local len, opts, nopts
    if type(text) == "string" then
        len, opts, nopts = #text, a, n + 1
    elseif type(text) == "cdata" then
        len = check_uint(2, n + 1, fname, a, "len", nil)
        if len == nil then argerror(2, n + 1, fname, "length expected, got nil") end
        if not ffi_istype(const_char_ptr, text) then text = ffi_cast(const_char_ptr, text) end
        opts, nopts = b, n + 2
    else
        expected(2, n, fname, "string", text)
    end
    local final, max_rows, line = 1, 0, 0
    if opts ~= nil then
        if type(opts) ~= "table" then expected(2, nopts, fname, "table", opts) end
        if opts.final == false then final = 0 end
        max_rows = check_uint(2, nopts, fname, opts.max_rows, "max_rows", 0)
        line = check_uint(2, nopts, fname, opts.line, "line", 0)
    end
    u64_box[0] = line
    size_box[0] = 0
    return text, len, final, max_rows
end

-- batch:parse_libsvm(text[, {final=true, max_rows=0, line=0}])
-- batch:parse_libsvm(ptr, len[, opts])        (text in FFI memory)
-- Appends the rows of libsvm text. final (default true): the last line
-- counts even without its '\n'; false leaves it for the next call.
-- max_rows: stop after that many rows (0: no limit). line: the number of
-- lines before this text. Returns rows_added, bytes consumed, and the line
-- count after the consumed text (pass it as `line` next time); or nil, err.
-- Malformed lines become bad rows (see bad_rows), scored as NaN.
function Batch:parse_libsvm(text, a2, a3)
    local h = growable(self, "parse_libsvm")
    local len, final, max_rows
    text, len, final, max_rows = text_args("parse_libsvm", 1, text, a2, a3)
    local before = C.wisp_batch_rows(h)
    local rc = C.wisp_batch_parse_libsvm(h, text, len, final, max_rows, u64_box, size_box)
    if rc ~= 0 then return nil, last_error(rc, "parse_libsvm") end
    return tonumber(C.wisp_batch_rows(h) - before), tonumber(size_box[0]), tonumber(u64_box[0])
end

-- batch:parse_libsvm_buf(text, len, max_rows[, final[, line]]) -> rows_added, bytes
-- consumed, line count after them; or nil, err. parse_libsvm's hot-path form: text a
-- Lua string or a `const char *` (e.g. a request body's buffer) of len bytes,
-- positional arguments (final: default true; line: default 0), no options table.
function Batch:parse_libsvm_buf(text, len, max_rows, final, line)
    local h = handle(self, Batch, "batch", "parse_libsvm_buf")
    if self._wrapped or self._inflight then growable(self, "parse_libsvm_buf") end
    u64_box[0] = line or 0
    size_box[0] = 0
    local before = C.wisp_batch_rows(h)
    local rc = C.wisp_batch_parse_libsvm(h, text, len, final == false and 0 or 1, max_rows or 0, u64_box, size_box)
    if rc ~= 0 then return nil, last_error(rc, "parse_libsvm") end
    return tonumber(C.wisp_batch_rows(h) - before), tonumber(size_box[0]), tonumber(u64_box[0])
end

function Batch:rows()
    return tonumber(C.wisp_batch_rows(handle(self, Batch, "batch", "rows")))
end

function Batch:nnz()
    return tonumber(C.wisp_batch_nnz(handle(self, Batch, "batch", "nnz")))
end

function Batch:nvals()
    return tonumber(C.wisp_batch_nvals(handle(self, Batch, "batch", "nvals")))
end

function Batch:bad_count()
    return tonumber(C.wisp_batch_bad_count(handle(self, Batch, "batch", "bad_count")))
end

-- The malformed input rows: an array of {row=0-based row index, line=input
-- line number, msg=what is wrong}.
function Batch:bad_rows()
    return base.bad_rows(handle(self, Batch, "batch", "bad_rows"), C.wisp_batch_bad_count, C.wisp_batch_bad_row)
end

-- Copies of the CSR arrays as Lua tables (for inspection and tests):
-- {indptr={...}, ids={...}, val_ptr={...} or nil, vals={...} or nil}, all 1-based arrays
-- (row_ptr: the same table as indptr, an alias kept through 0.1.x).
function Batch:csr()
    local h = handle(self, Batch, "batch", "csr")
    local rows = tonumber(C.wisp_batch_rows(h))
    local nnz = tonumber(C.wisp_batch_nnz(h))
    local nvals = tonumber(C.wisp_batch_nvals(h))
    local function copy(p, n)
        if p == nil then return nil end
        local t = {}
        for i = 0, n - 1 do t[i + 1] = tonumber(p[i]) end
        return t
    end
    local indptr = copy(C.wisp_batch_indptr(h), rows + 1) or {}
    return {
        indptr = indptr,
        row_ptr = indptr,
        ids = copy(C.wisp_batch_ids(h), nnz) or {},
        val_ptr = copy(C.wisp_batch_val_ptr(h), rows + 1),
        vals = copy(C.wisp_batch_vals(h), nvals),
    }
end

-- Forget the rows, keep the memory (not for zero-copy batches).
function Batch:clear()
    local h = growable(self, "clear")
    C.wisp_batch_clear(h)
end

function Batch:is_wrapped() return self._wrapped end

function Batch:close()
    if getmetatable(self) ~= Batch then handle(self, Batch, "batch", "close") end
    local h = self._h
    if h == nil then return end
    if self._inflight then not_in_flight(self, "close") end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_batch_free(h)
    self._refs = nil
end

function Batch:is_closed() return self._h == nil end

local function wrap(fname, e, rows, indptr, ids, val_ptr, vals)
    rows = check_uint(2, 1, fname, rows, "rows", nil)
    if rows == nil then argerror(2, 1, fname, "number of rows expected, got nil") end
    need(2, 2, fname, ffi_elems(2, 2, fname, indptr, u32p_probe, "uint32_t array", 4), rows + 1, "indptr")
    local nnz = tonumber(indptr[rows])
    need(2, 3, fname, ffi_elems(2, 3, fname, ids, u32p_probe, "uint32_t array", 4), nnz, "ids")
    local nvals = nnz
    if val_ptr ~= nil then
        need(2, 4, fname, ffi_elems(2, 4, fname, val_ptr, u32p_probe, "uint32_t array", 4), rows + 1, "val_ptr")
        nvals = tonumber(val_ptr[rows])
        if vals == nil then argerror(2, 5, fname, "vals expected with val_ptr") end
    end
    if vals ~= nil then
        need(2, 5, fname, ffi_elems(2, 5, fname, vals, f32p_probe, "float array", 4), nvals, "vals")
    end
    local rc = C.wisp_batch_wrap(e._h, rows, indptr, ids, val_ptr, vals, batch_box)
    if rc ~= 0 then return nil, last_error(rc, fname) end
    local h = ffi_gc(batch_box[0], base.batch_gc)
    batch_box[0] = nil
    local b = new_batch_object(h, e, true)
    b._refs = { indptr = indptr, ids = ids, val_ptr = val_ptr, vals = vals }
    return b
end

-- wisp.batch_wrap(rows, indptr, ids[, val_ptr][, vals][, engine]) (wisp_batch_wrap)
-- A batch over FFI arrays without copies (the CSR layout of wisp.h: uint32
-- indptr[rows+1], uint32 ids, optional uint32 val_ptr[rows+1], optional
-- float vals). The batch keeps references to the arrays, so they live as
-- long as it does; they must not change while it is used. Pass nil for
-- val_ptr to give vals for every feature. wisp.batch_from_ffi is its old
-- name, kept as a deprecated alias (its messages say the name called).
local function wrap_fn(fname)
    return function(rows, indptr, ids, val_ptr, vals, eng)
        local e, err = resolve_engine(1, 6, fname, eng)
        if not e then return nil, err end
        local b, berr = wrap(fname, e, rows, indptr, ids, val_ptr, vals)
        return b, berr
    end
end
wisp.batch_wrap = wrap_fn("batch_wrap")
wisp.batch_from_ffi = wrap_fn("batch_from_ffi")

local function engine_wrap_fn(fname)
    return function(self, rows, indptr, ids, val_ptr, vals)
        handle(self, Engine, "engine", fname)
        local b, err = wrap(fname, self, rows, indptr, ids, val_ptr, vals)
        return b, err
    end
end
Engine.batch_wrap = engine_wrap_fn("batch_wrap")
Engine.batch_from_ffi = engine_wrap_fn("batch_from_ffi")

-- engine:batch_from_csr(rows, indptr, indptr_type, ids, id_type, nnz[, values, value_type[, flags]])
-- (wisp_batch_from_csr): a batch over CSR arrays as FFI pointers of the WISP_CSR_* types (values
-- nil: every feature binary), checked once in C: a negative id, a value that is not a finite
-- float32, an unordered row range (without WISP_CSR_STRICT) make bad rows with one message each.
-- The batch keeps references to the arrays; they must stay unchanged while it is used. -> the
-- batch (wrapped: it cannot grow) | nil, err
function Engine:batch_from_csr(rows, indptr, indptr_type, ids, id_type, nnz, values, value_type, flags)
    local h = handle(self, Engine, "engine", "batch_from_csr")
    local rc = C.wisp_batch_from_csr(h, rows, indptr, indptr_type, ids, id_type, nnz, values, value_type or 0,
                                     flags or 0, batch_box)
    if rc ~= 0 then return nil, last_error(rc, "batch_from_csr") end
    local bh = ffi_gc(batch_box[0], base.batch_gc)
    batch_box[0] = nil
    local b = new_batch_object(bh, self, true)
    b._refs = { indptr = indptr, ids = ids, values = values }
    return b
end

local function from_rows(fname, e, rows)
    if type(rows) ~= "table" then expected(2, 1, fname, "table", rows) end
    local b, err = new_batch(e)
    if not b then return nil, err end
    local h = b._h
    for r = 1, #rows do
        local row = rows[r]
        local where = fmt("row %d: ", r)
        if type(row) ~= "table" then
            argerror(2, 1, fname, fmt("%stable expected, got %s", where, typename(row)))
        end
        local ids, vals, bids = row.ids, row.vals, row.bids
        if ids == nil then ids = row end
        if bids ~= nil and vals == nil then vals = {} end
        local rc = add_row(2, fname, where, b, h, ids, vals, bids, 1, 1, 1)
        if rc ~= 0 then
            local msg = last_error(rc, fmt("%s: row %d", fname, r))
            b:close()
            return nil, msg
        end
    end
    return b
end

-- wisp.batch_from_rows({ {ids={...}, vals={...}}, {ids={...}}, {1, 2, 3}, ... }[, engine])
-- A growable batch from Lua rows: each row is {ids=, vals=} (vals
-- optional), {ids=, vals=, bids=} (mixed), or a plain array of ids.
function wisp.batch_from_rows(rows, eng)
    local e, err = resolve_engine(1, 2, "batch_from_rows", eng)
    if not e then return nil, err end
    local b, berr = from_rows("batch_from_rows", e, rows)
    return b, berr
end

function Engine:batch_from_rows(rows)
    handle(self, Engine, "engine", "batch_from_rows")
    local b, err = from_rows("batch_from_rows", self, rows)
    return b, err
end

M.new = new_batch
M.text_args = text_args
M.growable = growable
return M
