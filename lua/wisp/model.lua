-- model.lua — wisp's models (wisp.h section 3): loading, facts, weights, conversion, writing and
-- importing .wisp files.
--
-- Loaded by `require "wisp"` (init.lua): wisp.load, wisp.write_model, wisp.import_liblinear,
-- engine:load, and the Model class.

local ffi = require "ffi"
local base = require "wisp.base"
local engine = require "wisp.engine"

local C, K, wisp = base.C, base.K, base.wisp
local ffi_gc, ffi_str = ffi.gc, ffi.string
local type, tonumber, tostring, setmetatable, getmetatable = type, tonumber, tostring, setmetatable, getmetatable
local pairs, ipairs = pairs, ipairs
local floor, max = math.floor, math.max
local concat, sort = table.concat, table.sort
local fmt = string.format
local argerror, expected, handle, check_uint = base.argerror, base.expected, base.handle, base.check_uint
local check_dtype, ffi_elems, typename = base.check_dtype, base.ffi_elems, base.typename
local last_error, model_box, float_vla, f32p_probe = base.last_error, base.model_box, base.float_vla, base.f32p_probe
local Engine, resolve_engine = engine.Engine, engine.resolve

local Model = {}; Model.__index = Model
wisp.Model = Model
base.register(Model, "model")

local M = { Model = Model }

local function load_model(fname, e, path, opts, nopts)
    local flags = 0
    if opts ~= nil then
        if type(opts) ~= "table" then expected(2, nopts, fname, "table", opts) end
        if opts.hugepages then flags = K.WISP_LOAD_HUGEPAGES end
    end
    local rc = C.wisp_model_load_ex(e._h, path, flags, model_box)
    if rc ~= 0 then return nil, last_error(rc) end
    local h = ffi_gc(model_box[0], C.wisp_model_free)
    model_box[0] = nil
    return setmetatable({ _h = h, engine = e }, Model)
end

-- wisp.load(path[, {engine=, hugepages=true}]) -> model or nil, err
function wisp.load(path, opts)
    if type(path) ~= "string" then expected(1, 1, "load", "string", path) end
    local eng
    if type(opts) == "table" then eng = opts.engine end
    local e, err = resolve_engine(1, 2, "load", eng)
    if not e then return nil, err end
    local m, merr = load_model("load", e, path, opts, 2)
    return m, merr
end

function Engine:load(path, opts)
    handle(self, Engine, "engine", "load")
    if type(path) ~= "string" then expected(1, 1, "load", "string", path) end
    local m, err = load_model("load", self, path, opts, 2)
    return m, err
end

local function parse_meta(text)
    local meta = {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        local k, v = line:match("^([^=]*)=(.*)$")
        if k and k ~= "" then meta[k] = v end
    end
    return meta
end

-- {num_features=, bias=, dtype="f32"|"f16"|"i8", scale=, path=, file_size=,
--  meta={k=v...}, columns=string or nil}
function Model:info()
    local h = handle(self, Model, "model", "info")
    local cols = ffi_str(C.wisp_model_columns(h))
    return {
        num_features = tonumber(C.wisp_model_num_features(h)),
        bias = C.wisp_model_bias(h),
        dtype = ffi_str(C.wisp_dtype_name(C.wisp_model_dtype(h))),
        scale = C.wisp_model_scale(h),
        path = ffi_str(C.wisp_model_path(h)),
        file_size = tonumber(C.wisp_model_file_size(h)),
        meta = parse_meta(ffi_str(C.wisp_model_meta_text(h))),
        columns = cols ~= "" and cols or nil,
    }
end

-- Whether the file at the model's path changed since the load: false, or true and
-- how ("replaced", "rewritten in place", "truncated in place", "removed", ...);
-- nil, err when the path cannot be examined. The model keeps its verified bytes.
local why_buf = ffi.new("char[512]")
function Model:file_changed()
    local h = handle(self, Model, "model", "file_changed")
    local rc = C.wisp_model_file_changed(h, why_buf, 512)
    if rc < 0 then return nil, last_error(rc, "file_changed") end
    if rc == 0 then return false end
    return true, ffi_str(why_buf)
end

function Model:num_features()
    return tonumber(C.wisp_model_num_features(handle(self, Model, "model", "num_features")))
end

function Model:bias()
    return C.wisp_model_bias(handle(self, Model, "model", "bias"))
end

function Model:dtype()
    return ffi_str(C.wisp_dtype_name(C.wisp_model_dtype(handle(self, Model, "model", "dtype"))))
end

-- The value of a meta key, or nil.
function Model:meta(key)
    local h = handle(self, Model, "model", "meta")
    if type(key) ~= "string" then expected(1, 1, "meta", "string", key) end
    local s = C.wisp_model_meta(h, key)
    if s == nil then return nil end
    return ffi_str(s)
end

-- The dequantized weight of a 0-based feature id (0 when out of range).
function Model:weight(id)
    local h = handle(self, Model, "model", "weight")
    local t = type(id)
    if t == "number" then
        if not (id >= 0 and id < 2^64) or id ~= floor(id) then
            argerror(1, 1, "weight", "non-negative integer expected, got " .. tostring(id))
        end
    elseif t ~= "cdata" then
        expected(1, 1, "weight", "integer", id)
    end
    return C.wisp_model_weight(h, id)
end

-- Write this model again as `path` with weights stored as `dtype`.
function Model:convert(path, dtype)
    local h = handle(self, Model, "model", "convert")
    if type(path) ~= "string" then expected(1, 1, "convert", "string", path) end
    local d = check_dtype(1, 2, "convert", dtype)
    local rc = C.wisp_model_convert(h, path, d)
    if rc ~= 0 then return nil, last_error(rc, "convert") end
    return true
end

function Model:close()
    if getmetatable(self) ~= Model then handle(self, Model, "model", "close") end
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_model_free(h)
end

function Model:is_closed() return self._h == nil end

-- "k=v\n" lines from a table (keys sorted, so files are reproducible) or a string.
local function meta_text(depth, n, fname, meta)
    if meta == nil then return nil end
    if type(meta) == "string" then return meta end
    if type(meta) ~= "table" then expected(depth + 1, n, fname, "table", meta) end
    local keys = {}
    for k, v in pairs(meta) do
        if type(k) ~= "string" or k == "" or k:find("[=\n]") then
            argerror(depth + 1, n, fname, "meta key " .. tostring(k) .. ": a non-empty string without '=' or newline expected")
        end
        if type(v) ~= "string" and type(v) ~= "number" and type(v) ~= "boolean" then
            argerror(depth + 1, n, fname, "meta." .. k .. ": string expected, got " .. typename(v))
        end
        if tostring(v):find("\n") then
            argerror(depth + 1, n, fname, "meta." .. k .. ": a value without newlines expected")
        end
        keys[#keys + 1] = k
    end
    sort(keys)
    local lines = {}
    for i, k in ipairs(keys) do lines[i] = k .. "=" .. tostring(meta[k]) .. "\n" end
    return concat(lines)
end

-- wisp.write_model(path, weights, {bias=, dtype=, meta={k=v}, columns=})
-- wisp.write_model(path, float_array, n, {...})
-- `weights` is a Lua array (weights[1] is feature 0's weight) or an FFI
-- float array of n weights. Returns true or nil, err.
function wisp.write_model(path, weights, a3, a4)
    if type(path) ~= "string" then expected(1, 1, "write_model", "string", path) end
    local w, n, opts, nopts
    if type(weights) == "table" then
        n = #weights
        w = float_vla(max(n, 1))
        for i = 1, n do
            local v = weights[i]
            if type(v) ~= "number" then
                argerror(1, 2, "write_model", fmt("weights[%d]: number expected, got %s", i, typename(v)))
            end
            w[i - 1] = v
        end
        opts, nopts = a3, 3
    elseif type(weights) == "cdata" then
        local len = ffi_elems(1, 2, "write_model", weights, f32p_probe, "float array", 4)
        n = check_uint(1, 3, "write_model", a3, "n", nil)
        if n == nil then argerror(1, 3, "write_model", "number of weights expected, got nil") end
        if len and len < n then
            argerror(1, 3, "write_model", fmt("n is %d but the array holds %d floats", n, len))
        end
        w = weights
        opts, nopts = a4, 4
    else
        expected(1, 2, "write_model", "table or float array", weights)
    end
    local bias, dtype, meta, columns = 0, K.WISP_F32, nil, nil
    if opts ~= nil then
        if type(opts) ~= "table" then expected(1, nopts, "write_model", "table", opts) end
        bias = opts.bias or 0
        if type(bias) ~= "number" then argerror(1, nopts, "write_model", "bias: number expected, got " .. typename(bias)) end
        dtype = check_dtype(1, nopts, "write_model", opts.dtype)
        meta = meta_text(1, nopts, "write_model", opts.meta)
        columns = opts.columns
        if columns ~= nil and type(columns) ~= "string" then
            argerror(1, nopts, "write_model", "columns: string expected, got " .. typename(columns))
        end
    end
    local rc = C.wisp_model_write(path, w, n, bias, dtype, meta, columns)
    if rc ~= 0 then return nil, last_error(rc, "write_model") end
    return true
end

-- An importer: fname(src, dst[, dtype]) -> true or nil, err, over the C call
-- cfn(src_path, out_path, dtype) (wisp_import_*).
local function importer(fname, cfn)
    return function(src, dst, dtype)
        if type(src) ~= "string" then expected(1, 1, fname, "string", src) end
        if type(dst) ~= "string" then expected(1, 2, fname, "string", dst) end
        local d = check_dtype(1, 3, fname, dtype)
        local rc = cfn(src, dst, d)
        if rc ~= 0 then return nil, last_error(rc, fname) end
        return true
    end
end
M.importer = importer

-- wisp.import_liblinear(src, dst[, dtype]) -> true or nil, err: a LIBLINEAR model file
wisp.import_liblinear = importer("import_liblinear", C.wisp_import_liblinear)

-- wisp.import_onnx(src, dst[, dtype]) -> true or nil, err: an ONNX-ML LinearClassifier
-- (binary) or LinearRegressor file as a .wisp model (engine/model/import_onnx.c's rules)
wisp.import_onnx = importer("import_onnx", function(src, dst, d) return C.wisp_import_onnx(src, dst, d) end)

return M
