-- columns.lua — feature columns described in Lua, exact to TensorFlow's tf.feature_column, saved inside .wisp files; raw rows -> batches.
--
--   local wisp = require "wisp"
--   local fc = require "wisp.columns"
--   local age = fc.numeric("age", { default = 0, normalizer = { type = "standard", mean = 38, std = 13 } })
--   local spec = assert(fc.spec {
--       age,
--       fc.bucketized(age, { 18, 25, 35, 50, 65 }),           -- "age_bucketized"
--       fc.hash_bucket("city", 1000),
--       fc.vocabulary_list("color", { "red", "green" }, { num_oov_buckets = 2 }),
--       fc.crossed({ "city", fc.bucketized(age, { 30, 60 }) }, 10000),
--   })
--   wisp.write_model("m.wisp", weights, { bias = b, columns = spec:json() })
--   local t = spec:transformer()                       -- raw rows -> a batch
--   t:add { age = 37, city = "Paris", color = "mauve" }
--   local batch = t:transform()
--
-- Names follow TensorFlow: numeric, hash_bucket, vocabulary_list and
-- identity columns are named after their input; bucketized columns
-- "<source>_bucketized"; crosses the sorted key names joined by "_X_".
-- Each column owns the slice [offset, offset + size) of the weight table,
-- given in order unless a column says otherwise. Inputs not declared with
-- fc.input are inferred (numeric: float32, hash_bucket: string unless
-- opts.dtype, vocabulary: from its entries, identity: int64, a raw cross
-- key: from its other uses, else string). The description's grammar and
-- TensorFlow's rules are written at the top of engine/columns.c.
--
-- Conventions of wisp (lua-resty-core's): caller mistakes raise errors;
-- runtime failures return nil, "context: reason".

local ffi = require "ffi"
local C = require "wisp.cdef"
local wisp = require "wisp"

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

local columns_box = ffi_new("wisp_columns *[1]")
local raw_box     = ffi_new("wisp_raw *[1]")
local size_box    = ffi_new("size_t[1]")
local u64_box     = ffi_new("uint64_t[1]")
local str_box     = ffi_new("const char *[1]")
local int64_t     = ffi.typeof("int64_t")
local uint64_t    = ffi.typeof("uint64_t")

local function last_error(rc, context)
    local msg = ffi_str(C.wisp_errmsg())
    if msg == "" then msg = ffi_str(C.wisp_strerror(rc)) end
    return context .. ": " .. msg
end

local function argerr(n, fname, msg, level)
    error(fmt("bad argument #%d to '%s' (%s)", n, fname, msg), (level or 1) + 2)
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

local function opts_of(n, fname, opts)
    if opts == nil then return {} end
    if type(opts) ~= "table" then argerr(n, fname, "options table expected", 2) end
    return opts
end

-- fc.numeric(key [, {name=, default=, dtype="float32"|"int64", normalizer={type="standard", mean=, std=} | {type="affine", scale=, shift=}}])
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
-- JSON (deterministic encoder; small decoder for descriptions read back)
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

-- A small JSON decoder (descriptions read back from models; numbers become Lua numbers).
local function decode(s)
    local pos = 1
    local function fail(what) error(fmt("columns: invalid JSON at byte %d: %s", pos, what), 0) end
    local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
    local value
    local function str()
        local out, i = {}, pos + 1
        while true do
            local j = s:find('["\\]', i)
            if not j then fail("unterminated string") end
            out[#out + 1] = sub(s, i, j - 1)
            if sub(s, j, j) == '"' then pos = j + 1; return concat(out) end
            local e = sub(s, j + 1, j + 1)
            if e == "u" then
                local cp = tonumber(sub(s, j + 2, j + 5), 16) or fail("bad \\u escape")
                i = j + 6
                if cp >= 0xD800 and cp <= 0xDBFF and sub(s, i, i + 1) == "\\u" then
                    local lo = tonumber(sub(s, i + 2, i + 5), 16) or fail("bad \\u escape")
                    cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
                    i = i + 6
                end
                if cp < 0x80 then out[#out + 1] = string.char(cp)
                elseif cp < 0x800 then out[#out + 1] = string.char(0xC0 + floor(cp / 64), 0x80 + cp % 64)
                elseif cp < 0x10000 then out[#out + 1] = string.char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
                else out[#out + 1] = string.char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64, 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64) end
            else
                local m = ({ ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' })[e]
                if not m then fail("bad escape") end
                out[#out + 1] = m
                i = j + 2
            end
        end
    end
    function value()
        ws()
        local c = sub(s, pos, pos)
        if c == "{" then
            local o = {}
            pos = pos + 1; ws()
            if sub(s, pos, pos) == "}" then pos = pos + 1; return o end
            while true do
                ws()
                if sub(s, pos, pos) ~= '"' then fail("expected a key") end
                local k = str(); ws()
                if sub(s, pos, pos) ~= ":" then fail("expected ':'") end
                pos = pos + 1
                o[k] = value(); ws()
                local d = sub(s, pos, pos); pos = pos + 1
                if d == "}" then return o end
                if d ~= "," then fail("expected ',' or '}'") end
            end
        elseif c == "[" then
            local a = {}
            pos = pos + 1; ws()
            if sub(s, pos, pos) == "]" then pos = pos + 1; return a end
            while true do
                a[#a + 1] = value(); ws()
                local d = sub(s, pos, pos); pos = pos + 1
                if d == "]" then return a end
                if d ~= "," then fail("expected ',' or ']'") end
            end
        elseif c == '"' then return str()
        elseif s:find("^true", pos) then pos = pos + 4; return true
        elseif s:find("^false", pos) then pos = pos + 5; return false
        elseif s:find("^null", pos) then pos = pos + 4; return nil
        end
        local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
        if not num or num == "" then fail("expected a value") end
        pos = pos + #num
        return tonumber(num) or fail("bad number")
    end
    local v = value()
    ws()
    if pos <= #s then fail("text after the value") end
    return v
end
M.json_decode = decode

---------------------------------------------------------------------------
-- specs: a list of columns, their inputs, their slices
---------------------------------------------------------------------------

local Spec = {}
Spec.__index = Spec
M.Spec = Spec

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

-- fc.spec({column, ..., fc.input(...), ...} [, {num_features=}]) -> spec, or nil, err
-- Inputs may be listed among the columns (fc.input) or inferred.
function M.spec(list, opts)
    if type(list) ~= "table" then argerr(1, "spec", "a list of columns expected") end
    opts = opts_of(2, "spec", opts)
    local cols, declared, order = {}, {}, {}
    for i, c in ipairs(list) do
        if type(c) == "table" and c._input then
            if declared[c.name] then argerr(1, "spec", "input '" .. c.name .. "' is declared twice") end
            declared[c.name] = c
            order[#order + 1] = c.name
        elseif is_column(c) then
            cols[#cols + 1] = c
        else
            argerr(1, "spec", "entry " .. i .. " is neither a column nor an input")
        end
    end
    if #cols == 0 then argerr(1, "spec", "no columns") end
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

local function spec_from_text(text, h)
    local ok, t = pcall(decode, text)
    local s = setmetatable({ _h = h, text = text }, Spec)
    if ok and type(t) == "table" then
        s.columns, s.inputs = t.columns, t.inputs
    end
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
-- the transformer: raw rows (Lua tables, TSV/CSV, JSON lines) -> a batch
---------------------------------------------------------------------------

local Transformer = {}
Transformer.__index = Transformer
M.Transformer = Transformer

-- spec:transformer([engine]) -> transformer, or nil, err
function Spec:transformer(eng)
    local e, err = eng, nil
    if e == nil then e, err = wisp.default_engine() end
    if not e then return nil, err end
    if getmetatable(e) ~= wisp.Engine or e._h == nil then argerr(1, "transformer", "an open engine expected") end
    local rc = C.wisp_raw_new(e._h, self._h, raw_box)
    if rc ~= 0 then return nil, last_error(rc, "transformer") end
    local h = ffi_gc(raw_box[0], C.wisp_raw_free)
    raw_box[0] = nil
    local index, dtypes = {}, {}
    for i = 0, tonumber(C.wisp_columns_num_inputs(self._h)) - 1 do
        local name = ffi_str(C.wisp_columns_input_name(self._h, i))
        index[name] = i
        dtypes[i] = C.wisp_columns_input_dtype(self._h, i)
    end
    return setmetatable({ _h = h, spec = self, engine = e, _index = index, _dtype = dtypes, _schema = nil }, Transformer)
end

local function raw_handle(self, fname)
    if getmetatable(self) ~= Transformer then error(fmt("calling '%s' on bad self", fname), 3) end
    local h = self._h
    if h == nil then error(fmt("calling '%s' on a closed transformer", fname), 3) end
    return h
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
function Transformer:add(row, line)
    local h = raw_handle(self, "add")
    if type(row) ~= "table" then argerr(1, "add", "row table expected, got " .. type(row)) end
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

function Transformer:add_rows(rows)
    raw_handle(self, "add_rows")
    if type(rows) ~= "table" then argerr(1, "add_rows", "a list of rows expected") end
    for i = 1, #rows do
        local ok, err = self:add(rows[i])
        if not ok then return nil, err end
    end
    return true
end

local function parse_text(self, fname, cfn, text, opts)
    local h = raw_handle(self, fname)
    if type(text) ~= "string" then argerr(1, fname, "string expected, got " .. type(text), 2) end
    opts = opts or {}
    if type(opts) ~= "table" then argerr(2, fname, "options table expected", 2) end
    u64_box[0] = opts.line or 0
    local final = opts.final == nil and 1 or (opts.final and 1 or 0)
    local rc = cfn(h, text, #text, final, opts.max_rows or 0, u64_box, size_box)
    local consumed, line = tonumber(size_box[0]), tonumber(u64_box[0])
    if rc ~= 0 then return nil, last_error(rc, fname) end
    return consumed, line
end

-- t:parse_tsv(text [, {schema="criteo"|"header"|"a,b,c", delim="\t"|",", final=true, line=0, max_rows=0}])
-- -> bytes consumed, lines so far; or nil, err. The schema is kept for later calls.
function Transformer:parse_tsv(text, opts)
    local h = raw_handle(self, "parse_tsv")
    opts = opts or {}
    local delim = opts.delim or "\t"
    if opts.schema or self._schema == nil then
        local schema = opts.schema or "criteo"
        if type(schema) == "table" then schema = concat(schema, ",") end
        if (delim ~= "\t" and delim ~= ",") then argerr(2, "parse_tsv", "delim: '\\t' or ',' expected") end
        local rc = C.wisp_raw_set_schema(h, schema, byte(delim))
        if rc ~= 0 then return nil, last_error(rc, "parse_tsv") end
        self._schema = schema
    end
    return parse_text(self, "parse_tsv", C.wisp_raw_parse_tsv, text, opts)
end

-- t:parse_jsonl(text [, {final=true, line=0, max_rows=0}]) -> bytes consumed, lines; or nil, err
function Transformer:parse_jsonl(text, opts)
    return parse_text(self, "parse_jsonl", C.wisp_raw_parse_jsonl, text, opts)
end

function Transformer:rows() return tonumber(C.wisp_raw_rows(raw_handle(self, "rows"))) end

function Transformer:bad_rows()
    local h = raw_handle(self, "bad_rows")
    local out = {}
    for i = 0, tonumber(C.wisp_raw_bad_count(h)) - 1 do
        if C.wisp_raw_bad_row(h, i, size_box, u64_box, str_box) == 0 then
            out[#out + 1] = { row = tonumber(size_box[0]), line = tonumber(u64_box[0]), msg = ffi_str(str_box[0]) }
        end
    end
    return out
end

-- t:transform([batch]) -> the batch (a new one when none is given) with one
-- row appended per raw row; or nil, err. The raw rows stay until :clear().
function Transformer:transform(batch)
    local h = raw_handle(self, "transform")
    local err
    if batch == nil then
        batch, err = wisp.batch(self.engine)
        if not batch then return nil, err end
    elseif getmetatable(batch) ~= wisp.Batch or batch._h == nil then
        argerr(1, "transform", "an open batch expected")
    end
    local rc = C.wisp_transform(h, batch._h)
    if rc ~= 0 then return nil, last_error(rc, "transform") end
    return batch
end

function Transformer:clear() C.wisp_raw_clear(raw_handle(self, "clear")) end

function Transformer:close()
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_raw_free(h)
end

-- Raw values of one input (tests, devices): { {v, ...} per row } as Lua values.
function Transformer:input_values(name)
    local h = raw_handle(self, "input_values")
    local idx = self._index[name]
    if idx == nil then argerr(1, "input_values", "unknown input '" .. tostring(name) .. "'") end
    local rp, vals, so = ffi_new("const uint32_t *[1]"), ffi_new("const void *[1]"), ffi_new("const uint32_t *[1]")
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
