-- columns.lua — column descriptions built in Lua, exact to TensorFlow's tf.feature_column,
-- saved inside .wisp files; each gives raw batches (raw.lua).
--
--   local wisp = require "wisp"
--   local fc = require "wisp.columns"
--   local age = fc.numeric("age", { default = 0, normalizer = { type = "standard", mean = 38, std = 13 } })
--   local desc = assert(fc.description {
--       age,
--       fc.bucketized(age, { 18, 25, 35, 50, 65 }),           -- "age_bucketized"
--       fc.hash_bucket("city", 1000),
--       fc.vocabulary_list("color", { "red", "green" }, { num_oov_buckets = 2 }),
--       fc.crossed({ "city", fc.bucketized(age, { 30, 60 }) }, 10000),
--   })
--   wisp.write_model("m.wisp", weights, { bias = b, columns = desc:json() })
--   local r = desc:raw_batch()                         -- rows of raw inputs
--   r:add { age = 37, city = "Paris", color = "mauve" }
--   local batch = r:transform()                        -- the transform: raw batch -> batch
--
-- Names follow TensorFlow: numeric, hash_bucket, vocabulary_list and
-- identity columns are named after their input; bucketized columns
-- "<source>_bucketized"; crosses the sorted key names joined by "_X_".
-- Each column owns the slice [offset, offset + size) of the weight table,
-- given in order unless a column says otherwise. Inputs not declared with
-- fc.input are inferred (numeric: float32, hash_bucket: string unless
-- opts.dtype, vocabulary: from its entries, identity: int64, a raw cross
-- key: from its other uses, else string). The description's grammar and
-- TensorFlow's rules: engine/COLUMNS.md. Old names kept as deprecated aliases:
-- fc.spec (fc.description), desc:transformer() (desc:raw_batch()), fc.Spec, fc.Transformer.
--
-- Conventions of wisp (lua-resty-core's): caller mistakes raise errors;
-- runtime failures return nil, "context: reason".

local ffi = require "ffi"
local base = require "wisp.base"
local wisp = require "wisp"
local raw = require "wisp.raw"

local ffi_new, ffi_gc, ffi_str, ffi_cast = ffi.new, ffi.gc, ffi.string, ffi.cast
local type, error, tostring, tonumber, pairs, ipairs = type, error, tostring, tonumber, pairs, ipairs
local setmetatable, getmetatable = setmetatable, getmetatable
local floor, huge = math.floor, math.huge
local concat, sort = table.concat, table.sort
local fmt, byte, sub = string.format, string.byte, string.sub

local M = {}

local INPUT_FLOAT32, INPUT_INT64, INPUT_STRING = 0, 1, 2
local DTYPE_NUM = { float32 = INPUT_FLOAT32, int64 = INPUT_INT64, string = INPUT_STRING }
M.DTYPES = { [0] = "float32", "int64", "string" }

local C, columns_box, last_error, argerror = base.C, base.columns_box, base.last_error, base.argerror

-- argerror at the caller of the public function (level: the wisp frames in between, 1 by default)
local function argerr(n, fname, msg, level)
    argerror((level or 1) + 1, n, fname, msg)
end

---------------------------------------------------------------------------
-- hashing (TensorFlow's Fingerprint64 and FingerprintCat64)
---------------------------------------------------------------------------

-- fingerprint64(s) -> uint64 cdata
function M.fingerprint64(s)
    if type(s) ~= "string" then argerr(1, "fingerprint64", "string expected, got " .. type(s)) end
    return C.wisp_fingerprint64(s, #s)
end

function M.fingerprint_cat64(a, b)
    return C.wisp_fingerprint_cat64(a, b)
end

---------------------------------------------------------------------------
-- columns
---------------------------------------------------------------------------

local Column = {}
Column.__index = Column
M.Column = Column

local function is_column(v) return getmetatable(v) == Column end

local function check_name(n, fname, v, what)
    if type(v) ~= "string" or v == "" then argerr(n, fname, (what or "input name") .. " (a non-empty string) expected", 2) end
end

local function check_count(n, fname, v, what)
    if type(v) ~= "number" or v < 1 or v ~= floor(v) or v > 0xFFFFFFFE then
        argerr(n, fname, (what or "buckets") .. ": an integer in [1, 2^32-2] expected, got " .. tostring(v), 2)
    end
end

local function opts_of(n, fname, opts, level)
    if opts == nil then return {} end
    if type(opts) ~= "table" then argerr(n, fname, "options table expected", (level or 1) + 1) end
    return opts
end

-- fc.numeric(key [, {name=, default=, dtype="float32"|"int64",
--                    normalizer={type="standard", mean=, std=} | {type="affine", scale=, shift=}}])
function M.numeric(key, opts)
    check_name(1, "numeric", key)
    opts = opts_of(2, "numeric", opts)
    local nz = opts.normalizer
    if nz ~= nil then
        if type(nz) ~= "table" or (nz.type ~= "standard" and nz.type ~= "affine") then
            argerr(2, "numeric", "normalizer: {type='standard', mean=, std=} or {type='affine', scale=, shift=} expected")
        end
        local a, b = nz.type == "standard" and "mean" or "scale", nz.type == "standard" and "std" or "shift"
        if type(nz[a]) ~= "number" or type(nz[b]) ~= "number" then argerr(2, "numeric", "normalizer: numbers " .. a .. " and " .. b .. " expected") end
    end
    return setmetatable({ type = "numeric", key = key, name = opts.name or key, normalizer = nz,
                          _default = opts.default, _dtype = opts.dtype, offset = opts.offset }, Column)
end

-- fc.bucketized(numeric_column, boundaries [, {name=}])
function M.bucketized(source, boundaries, opts)
    if not is_column(source) or source.type ~= "numeric" then argerr(1, "bucketized", "a numeric column expected") end
    if type(boundaries) ~= "table" or #boundaries == 0 then argerr(2, "bucketized", "a non-empty list of boundaries expected") end
    for i, b in ipairs(boundaries) do
        if type(b) ~= "number" or b ~= b or b == huge or b == -huge then argerr(2, "bucketized", "boundaries[" .. i .. "] is not a finite number") end
        if i > 1 and not (b > boundaries[i - 1]) then argerr(2, "bucketized", "boundaries must increase (at " .. i .. ")") end
    end
    opts = opts_of(3, "bucketized", opts)
    local copy = {}
    for i, b in ipairs(boundaries) do copy[i] = b end
    return setmetatable({ type = "bucketized", source = source, boundaries = copy,
                          name = opts.name or (source.name .. "_bucketized"), offset = opts.offset }, Column)
end

-- fc.hash_bucket(key, buckets [, {name=, dtype="string"|"int64"}])
function M.hash_bucket(key, buckets, opts)
    check_name(1, "hash_bucket", key)
    check_count(2, "hash_bucket", buckets)
    opts = opts_of(3, "hash_bucket", opts)
    if opts.dtype ~= nil and opts.dtype ~= "string" and opts.dtype ~= "int64" then argerr(3, "hash_bucket", "dtype: 'string' or 'int64' expected") end
    return setmetatable({ type = "hash_bucket", key = key, buckets = buckets, name = opts.name or key,
                          _dtype = opts.dtype, offset = opts.offset }, Column)
end

-- fc.vocabulary_list(key, list [, {name=, num_oov_buckets=0, default_value=-1}])
function M.vocabulary_list(key, list, opts)
    check_name(1, "vocabulary_list", key)
    if type(list) ~= "table" or #list == 0 then argerr(2, "vocabulary_list", "a non-empty list expected") end
    local kind = type(list[1])
    if kind ~= "string" and kind ~= "number" then argerr(2, "vocabulary_list", "strings or integers expected") end
    local seen, copy = {}, {}
    for i, v in ipairs(list) do
        if type(v) ~= kind then argerr(2, "vocabulary_list", "entry " .. i .. " is not a " .. kind) end
        if kind == "number" and v ~= floor(v) then argerr(2, "vocabulary_list", "entry " .. i .. " is not an integer") end
        if seen[v] then argerr(2, "vocabulary_list", "entry " .. i .. " repeats '" .. tostring(v) .. "'") end
        seen[v] = true
        copy[i] = v
    end
    opts = opts_of(3, "vocabulary_list", opts)
    local oov, def = opts.num_oov_buckets or 0, opts.default_value
    if type(oov) ~= "number" or oov < 0 or oov ~= floor(oov) then argerr(3, "vocabulary_list", "num_oov_buckets: a non-negative integer expected") end
    if def ~= nil and (type(def) ~= "number" or def ~= floor(def) or def < -1 or def >= #list) then
        argerr(3, "vocabulary_list", "default_value: an integer in [-1, #list) expected")
    end
    if oov > 0 and def ~= nil and def ~= -1 then argerr(3, "vocabulary_list", "num_oov_buckets and default_value cannot both be set") end
    return setmetatable({ type = "vocabulary_list", key = key, vocabulary = copy, num_oov_buckets = oov > 0 and oov or nil,
                          default_value = def, name = opts.name or key,
                          _dtype = kind == "number" and "int64" or "string", offset = opts.offset }, Column)
end

-- fc.identity(key, buckets [, {name=, default_value=}])
function M.identity(key, buckets, opts)
    check_name(1, "identity", key)
    check_count(2, "identity", buckets)
    opts = opts_of(3, "identity", opts)
    local def = opts.default_value
    if def ~= nil and (type(def) ~= "number" or def ~= floor(def) or def < 0 or def >= buckets) then
        argerr(3, "identity", "default_value: an integer in [0, buckets) expected")
    end
    return setmetatable({ type = "identity", key = key, buckets = buckets, default_value = def,
                          name = opts.name or key, _dtype = "int64", offset = opts.offset }, Column)
end

-- The names TensorFlow's crossed_column sorts: input names and column names, nested crosses flattened.
local function leaf_names(keys, out)
    for _, k in ipairs(keys) do
        if type(k) == "string" then out[#out + 1] = k
        elseif k.type == "crossed" then leaf_names(k.keys, out)
        else out[#out + 1] = k.name end
    end
    return out
end

-- fc.crossed({key, ...}, buckets [, {name=, hash_key=}]): keys are input names or
-- categorical columns (bucketized, vocabulary_list, identity, crossed).
function M.crossed(keys, buckets, opts)
    if type(keys) ~= "table" or #keys < 2 then argerr(1, "crossed", "a list of at least 2 keys expected") end
    for i, k in ipairs(keys) do
        if type(k) ~= "string" and not is_column(k) then argerr(1, "crossed", "key " .. i .. ": an input name or a column expected") end
        if is_column(k) and (k.type == "hash_bucket" or k.type == "numeric") then
            argerr(1, "crossed", "key " .. i .. ": a " .. k.type .. " column cannot be crossed (TensorFlow refuses it; cross the input's name)")
        end
    end
    check_count(2, "crossed", buckets)
    opts = opts_of(3, "crossed", opts)
    local hk = opts.hash_key
    if hk ~= nil and type(hk) ~= "number" and type(hk) ~= "string" and type(hk) ~= "cdata" then
        argerr(3, "crossed", "hash_key: a number, a \"0x...\" string or a uint64 cdata expected")
    end
    local copy = {}
    for i, k in ipairs(keys) do copy[i] = k end
    local names = leaf_names(copy, {})
    sort(names)
    return setmetatable({ type = "crossed", keys = copy, buckets = buckets, hash_key = hk,
                          name = opts.name or concat(names, "_X_"), offset = opts.offset }, Column)
end

-- fc.input(name, dtype [, {sparse=false, default=}]): declare a raw input.
-- Dense inputs left out of a row take `default` (strings: "", int64: -1 when
-- not given: TensorFlow's missing markers; float32: none, so a row without it is bad).
function M.input(name, dtype, opts)
    check_name(1, "input", name)
    if DTYPE_NUM[dtype] == nil then argerr(2, "input", "dtype: 'float32', 'int64' or 'string' expected") end
    opts = opts_of(3, "input", opts)
    return { _input = true, name = name, dtype = dtype, sparse = opts.sparse and true or nil,
             default = opts.default, _has_default = opts.default ~= nil }
end

function Column:size()
    local t = self.type
    if t == "numeric" then return 1 end
    if t == "bucketized" then return #self.boundaries + 1 end
    if t == "vocabulary_list" then return #self.vocabulary + (self.num_oov_buckets or 0) end
    return self.buckets
end

---------------------------------------------------------------------------
-- JSON (deterministic encoder; descriptions read back are decoded by C: wisp_columns_parse)
---------------------------------------------------------------------------

local escapes = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f', ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }

local function enc_string(s)
    return '"' .. s:gsub('[%c"\\]', function(c) return escapes[c] or fmt("\\u%04x", byte(c)) end) .. '"'
end

local function enc_number(x)
    if type(x) == "cdata" then
        return (tostring(x):gsub("U?LL$", ""))
    end
    if x ~= x or x == huge or x == -huge then error("a description cannot hold NaN or infinities", 0) end
    if x == floor(x) and x > -2^53 and x < 2^53 then return fmt("%d", x) end
    return fmt("%.17g", x)
end

local function enc(v, keys)
    local t = type(v)
    if t == "string" then return enc_string(v) end
    if t == "number" or t == "cdata" then return enc_number(v) end
    if t == "boolean" then return v and "true" or "false" end
    if v == nil then return "null" end
    -- an object with an ordered key list, or an array
    if keys then
        local parts = {}
        for _, k in ipairs(keys) do
            if v[k] ~= nil then parts[#parts + 1] = enc_string(k) .. ":" .. v[k] end
        end
        return "{" .. concat(parts, ",") .. "}"
    end
    local parts = {}
    for i = 1, #v do parts[i] = enc(v[i]) end
    return "[" .. concat(parts, ",") .. "]"
end

local COL_KEYS = { "name", "type", "key", "source", "keys", "boundaries", "buckets", "vocabulary",
                   "num_oov_buckets", "default_value", "hash_key", "normalizer", "offset", "size" }

local function enc_column(c, top)
    local o = { type = enc(c.type) }
    if top or c.type ~= "numeric" then o.name = enc(c.name) end
    if c.key then o.key = enc(c.key) end
    if c.type == "numeric" and c.normalizer then
        local nz = c.normalizer
        o.normalizer = enc({ type = enc(nz.type), mean = nz.mean and enc(nz.mean), std = nz.std and enc(nz.std),
                             scale = nz.scale and enc(nz.scale), shift = nz.shift and enc(nz.shift) },
                           { "type", "mean", "std", "scale", "shift" })
    end
    if c.source then o.source = enc_column(c.source, false) end
    if c.keys then
        local parts = {}
        for i, k in ipairs(c.keys) do parts[i] = type(k) == "string" and enc(k) or enc_column(k, false) end
        o.keys = "[" .. concat(parts, ",") .. "]"
    end
    if c.boundaries then o.boundaries = enc(c.boundaries) end
    if c.buckets then o.buckets = enc(c.buckets) end
    if c.vocabulary then o.vocabulary = enc(c.vocabulary) end
    if c.num_oov_buckets then o.num_oov_buckets = enc(c.num_oov_buckets) end
    if c.default_value then o.default_value = enc(c.default_value) end
    if c.hash_key ~= nil then
        o.hash_key = type(c.hash_key) == "string" and enc(c.hash_key) or enc_number(c.hash_key)
    end
    if top then
        o.offset = enc(c.offset)
        o.size = enc(c:size())
    end
    return enc(o, COL_KEYS)
end

---------------------------------------------------------------------------
-- specs: a list of columns, their inputs, their slices
---------------------------------------------------------------------------

local Spec = {}
Spec.__index = Spec
M.Spec = Spec
M.Description = Spec

-- Record the inputs a column uses (with the dtype it implies, or nil).
local function collect_inputs(c, add)
    local t = c.type
    if t == "numeric" then add(c.key, c._dtype or "float32", c._default)
    elseif t == "bucketized" then collect_inputs(c.source, add)
    elseif t == "hash_bucket" or t == "vocabulary_list" or t == "identity" then add(c.key, c._dtype or "string")
    elseif t == "crossed" then
        for _, k in ipairs(c.keys) do
            if type(k) == "string" then add(k, nil) else collect_inputs(k, add) end
        end
    end
end

local function compile(text)
    local rc = C.wisp_columns_parse(text, #text, columns_box)
    if rc ~= 0 then
        local msg = ffi_str(C.wisp_errmsg())
        return nil, msg ~= "" and msg or last_error(rc, "columns")
    end
    local h = ffi_gc(columns_box[0], C.wisp_columns_free)
    columns_box[0] = nil
    return h
end

-- fc.description({column, ..., fc.input(...), ...} [, {num_features=}]) -> a column
-- description, or nil, err. Inputs may be listed among the columns (fc.input) or
-- inferred. fc.spec is its old name, kept as a deprecated alias (its messages say
-- 'spec'). The object's class is fc.Description (fc.Spec: the same table).
local function describe(fname, list, opts)
    if type(list) ~= "table" then argerr(1, fname, "a list of columns expected", 2) end
    opts = opts_of(2, fname, opts, 2)
    local cols, declared, order = {}, {}, {}
    for i, c in ipairs(list) do
        if type(c) == "table" and c._input then
            if declared[c.name] then argerr(1, fname, "input '" .. c.name .. "' is declared twice", 2) end
            declared[c.name] = c
            order[#order + 1] = c.name
        elseif is_column(c) then
            cols[#cols + 1] = c
        else
            argerr(1, fname, "entry " .. i .. " is neither a column nor an input", 2)
        end
    end
    if #cols == 0 then argerr(1, fname, "no columns", 2) end
    -- inputs: declared ones first, then inferred in the order of use
    local inferred, conflicts = {}, nil
    local function add(name, dtype, default)
        local d = declared[name]
        if d then return end
        local cur = inferred[name]
        if not cur then
            cur = { name = name }
            inferred[name] = cur
            order[#order + 1] = name
        end
        if dtype then
            if cur.dtype and cur.dtype ~= dtype and not conflicts then
                conflicts = fmt("input '%s' is used as %s and as %s (declare it with fc.input)", name, cur.dtype, dtype)
            end
            cur.dtype = cur.dtype or dtype
        end
        if default ~= nil then cur.default = default end
    end
    for _, c in ipairs(cols) do collect_inputs(c, add) end
    if conflicts then return nil, "columns: " .. conflicts end
    local inputs = {}
    for _, name in ipairs(order) do
        local d = declared[name]
        if d then inputs[#inputs + 1] = d
        else
            local inf = inferred[name]
            inputs[#inputs + 1] = { name = name, dtype = inf.dtype or "string", default = inf.default, _has_default = inf.default ~= nil }
        end
    end
    -- slices: explicit offsets kept, the others follow the last end
    local names, nf, next_off = {}, 0, 0
    local placed = {}
    for i, c in ipairs(cols) do
        if names[c.name] then return nil, "columns: two columns are named '" .. c.name .. "' (give one a name)" end
        names[c.name] = true
        local off = c.offset
        if off == nil then off = next_off end
        local p = setmetatable({}, { __index = c })
        p.offset = off
        placed[i] = p
        next_off = off + c:size()
        if next_off > nf then nf = next_off end
    end
    if opts.num_features and opts.num_features > nf then nf = opts.num_features end
    -- JSON
    local ins = {}
    for i, inp in ipairs(inputs) do
        local o = { name = enc(inp.name), dtype = enc(inp.dtype), sparse = inp.sparse and "true" or nil }
        if inp._has_default and inp.default ~= nil then o.default = enc(inp.default) end
        ins[i] = enc(o, { "name", "dtype", "sparse", "default" })
    end
    local cj = {}
    for i, c in ipairs(placed) do
        local ok, s = pcall(enc_column, setmetatable({ offset = c.offset }, { __index = cols[i] }), true)
        if not ok then return nil, "columns: column '" .. cols[i].name .. "': " .. s end
        cj[i] = s
    end
    local text = '{"format":"wisp-columns","version":1,\n"inputs":[\n' .. concat(ins, ",\n") ..
                 '\n],\n"columns":[\n' .. concat(cj, ",\n") .. "\n],\n" .. '"num_features":' .. fmt("%d", nf) .. "}\n"
    local h, err = compile(text)
    if not h then return nil, err end
    return setmetatable({ _h = h, text = text, columns = cols, inputs = inputs }, Spec)
end

function M.description(list, opts)
    local d, err = describe("description", list, opts)
    return d, err
end

function M.spec(list, opts)
    local d, err = describe("spec", list, opts)
    return d, err
end

-- A description read back (fc.parse, fc.from_model): decoded once, by C; its columns
-- and inputs are what the C accessors report (spec:slices(), spec:input_list()).
local function spec_from_text(text, h)
    local s = setmetatable({ _h = h, text = text }, Spec)
    s.columns, s.inputs = s:slices(), s:input_list()
    return s
end

-- fc.parse(json_text) -> spec, or nil, err
function M.parse(text)
    if type(text) ~= "string" then argerr(1, "parse", "string expected") end
    local h, err = compile(text)
    if not h then return nil, err end
    return spec_from_text(text, h)
end

-- fc.from_model(model) -> the spec saved in a loaded model (its slices checked
-- against the weight table), or nil, err
function M.from_model(model)
    if getmetatable(model) ~= wisp.Model or model._h == nil then argerr(1, "from_model", "an open model expected") end
    local rc = C.wisp_columns_from_model(model._h, columns_box)
    if rc ~= 0 then return nil, last_error(rc, "from_model") end
    local h = ffi_gc(columns_box[0], C.wisp_columns_free)
    columns_box[0] = nil
    return spec_from_text(ffi_str(C.wisp_model_columns(model._h)), h)
end

function Spec:json() return self.text end
function Spec:num_features() return tonumber(C.wisp_columns_num_features(self._h)) end
function Spec:count() return tonumber(C.wisp_columns_count(self._h)) end

-- spec:slices() -> { {name=, type=, offset=, size=}, ... } in column order
function Spec:slices()
    local h, out = self._h, {}
    for i = 0, tonumber(C.wisp_columns_count(h)) - 1 do
        out[i + 1] = { name = ffi_str(C.wisp_columns_name(h, i)), type = ffi_str(C.wisp_columns_type(h, i)),
                       offset = tonumber(C.wisp_columns_offset(h, i)), size = tonumber(C.wisp_columns_size(h, i)) }
    end
    return out
end

function Spec:slice(name)
    for _, s in ipairs(self:slices()) do
        if s.name == name then return s.offset, s.size end
    end
    return nil
end

-- spec:input_list() -> { {name=, dtype=, sparse=}, ... }
function Spec:input_list()
    local h, out = self._h, {}
    for i = 0, tonumber(C.wisp_columns_num_inputs(h)) - 1 do
        out[i + 1] = { name = ffi_str(C.wisp_columns_input_name(h, i)), dtype = M.DTYPES[C.wisp_columns_input_dtype(h, i)],
                       sparse = C.wisp_columns_input_sparse(h, i) == 1 }
    end
    return out
end

---------------------------------------------------------------------------
-- the raw batch of a description: raw rows (Lua tables, TSV/CSV, JSON lines), lua/wisp/raw.lua
---------------------------------------------------------------------------

M.RawBatch = raw.RawBatch
M.Transformer = raw.RawBatch                  -- deprecated: the class's old name

local function raw_batch_of(self, eng, fname)
    local e, err = eng, nil
    if e == nil then e, err = wisp.default_engine() end
    if not e then return nil, err end
    if getmetatable(e) ~= wisp.Engine or e._h == nil then argerr(1, fname, "an open engine expected", 2) end
    local r, rerr = raw.new(e, self, fname)
    return r, rerr
end

-- description:raw_batch([engine]) -> an empty raw batch for its inputs, or nil, err
function Spec:raw_batch(eng)
    local r, err = raw_batch_of(self, eng, "raw_batch")
    return r, err
end

-- description:transformer([engine]): the deprecated name of description:raw_batch
function Spec:transformer(eng)
    local r, err = raw_batch_of(self, eng, "transformer")
    return r, err
end

return M
