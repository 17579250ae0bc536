-- init.lua — `local wisp = require "wisp"`: engines, models, batches and sessions over the C API of engine/include/wisp.h.
--
-- Conventions (those of lua-resty-core):
-- * Caller mistakes (wrong argument types, use of a closed object) raise
--   "bad argument #N to 'fn' (...)" errors at the caller's line.
-- * Runtime failures (a missing or malformed file, a device failure, a
--   limit) return nil, "context: reason", the reason coming from wisp_errmsg().
-- * Every C handle is owned by one cdata with an ffi.gc finalizer; :close()
--   detaches the finalizer and frees now; a closed object raises when used.
-- * Hot paths allocate nothing: batch scratch arrays and session output
--   arrays are allocated once per object and grown geometrically.
-- * Ids are the model's 0-based feature ids, whatever Lua's 1-based arrays:
--   batch:add{0, 7} is a row with features 0 and 7. Row indices reported
--   by wisp (bad_rows) are 0-based too, like the FFI output arrays.

local ffi = require "ffi"
local C = require "wisp.cdef"
local K = require "wisp.const"

local ffi_new, ffi_gc, ffi_str, ffi_cast = ffi.new, ffi.gc, ffi.string, ffi.cast
local ffi_typeof, ffi_sizeof, ffi_istype = ffi.typeof, ffi.sizeof, ffi.istype
local type, error, tonumber, tostring, pcall = type, error, tonumber, tostring, pcall
local getmetatable, setmetatable, pairs, ipairs = getmetatable, setmetatable, pairs, ipairs
local floor, max = math.floor, math.max
local concat, sort = table.concat, table.sort
local fmt = string.format

local uint64_vla = ffi_typeof("uint64_t[?]")
local float_vla = ffi_typeof("float[?]")
local uint32_vla = ffi_typeof("uint32_t[?]")
local float_ptr = ffi_typeof("float *")
-- ffi.sizeof of a VLA is not compiled by the JIT: remember each output
-- array's length once (weak keys), so the scoring path stays on trace
local vla_len = setmetatable({}, { __mode = "k" })
local function vla_floats(a)
    local n = vla_len[a]
    if n == nil then n = ffi_sizeof(a) / 4; vla_len[a] = n end
    return n
end
local const_char_ptr = ffi_typeof("const char *")

-- out-parameter boxes, shared: a Lua state runs one call at a time
local engine_box  = ffi_new("wisp_engine *[1]")
local model_box   = ffi_new("wisp_model *[1]")
local batch_box   = ffi_new("wisp_batch *[1]")
local session_box = ffi_new("wisp_session *[1]")
local size_box    = ffi_new("size_t[1]")
local u64_box     = ffi_new("uint64_t[1]")
local str_box     = ffi_new("const char *[1]")
-- conversion probes: assigning checks a cdata's type like a C call would
local u32p_probe  = ffi_new("const uint32_t *[1]")
local f32p_probe  = ffi_new("const float *[1]")
local log_buf_len = 512
local log_buf     = ffi_new("char[?]", log_buf_len)

local wisp = {
    _VERSION = ffi_str(C.wisp_version()),
    const = K,
}

local Engine  = {}; Engine.__index  = Engine
local Model   = {}; Model.__index   = Model
local Batch   = {}; Batch.__index   = Batch
local Session = {}; Session.__index = Session
wisp.Engine, wisp.Model, wisp.Batch, wisp.Session = Engine, Model, Batch, Session

---------------------------------------------------------------------------
-- errors
---------------------------------------------------------------------------

-- The message for a failed C call: wisp_errmsg(), else the status text.
local function last_error(rc, context)
    local msg = ffi_str(C.wisp_errmsg())
    if msg == "" then msg = ffi_str(C.wisp_strerror(rc)) end
    if context then return context .. ": " .. msg end
    return msg
end

local function typename(v)
    local t = type(v)
    if t == "table" then
        local mt = getmetatable(v)
        if mt == Engine then return "engine" elseif mt == Model then return "model"
        elseif mt == Batch then return "batch" elseif mt == Session then return "session"
        elseif mt == wisp.VW then return "vw" end
    elseif t == "cdata" then
        return tostring(ffi_typeof(v)):match("^ctype<(.*)>$") or "cdata"
    end
    return t
end

-- Raise "bad argument #n to 'fname' (msg)" at the user's line; `depth` is
-- the number of wisp frames between argerror's caller and the user (1 when
-- called from the public function itself). Never tail-call it.
local function argerror(depth, n, fname, msg)
    error(fmt("bad argument #%d to '%s' (%s)", n, fname, msg), depth + 2)
end

local function expected(depth, n, fname, what, v)
    error(fmt("bad argument #%d to '%s' (%s expected, got %s)", n, fname, what, typename(v)), depth + 2)
end

-- The handle of a method's self, raising on a wrong or closed self.
local function handle(self, mt, what, fname)
    if getmetatable(self) ~= mt then
        error(fmt("calling '%s' on bad self (%s expected, got %s)", fname, what, typename(self)), 3)
    end
    local h = self._h
    if h == nil then
        error(fmt("calling '%s' on a closed %s", fname, what), 3)
    end
    return h
end

local function check_uint(depth, n, fname, v, name, default)
    if v == nil then return default end
    if type(v) ~= "number" or v < 0 or v ~= floor(v) or v >= 2^53 then
        argerror(depth + 1, n, fname, fmt("%s: non-negative integer expected, got %s", name, tostring(v)))
    end
    return v
end

local function check_dtype(depth, n, fname, d)
    if d == nil then return K.WISP_F32 end
    if type(d) == "string" then
        local v = C.wisp_dtype_parse(d)
        if v < 0 then argerror(depth + 1, n, fname, fmt("unknown dtype '%s' (use f32, f16 or i8)", d)) end
        return v
    end
    if d == K.WISP_F32 or d == K.WISP_F16 or d == K.WISP_I8 then return d end
    argerror(depth + 1, n, fname, fmt("dtype expected (f32, f16 or i8), got %s", tostring(d)))
end

-- Elements in an FFI array (nil for a pointer: unknown). Raises unless v
-- converts to `const T *` (probe: a `const T *[1]` box).
local function ffi_elems(depth, n, fname, v, probe, what, esize)
    if type(v) ~= "cdata" or not pcall(function() probe[0] = v end) then
        expected(depth + 1, n, fname, what, v)
    end
    probe[0] = nil
    if tostring(ffi_typeof(v)):find("%*") then return nil end
    local size = ffi_sizeof(v)
    if size == nil then return nil end
    return floor(size / esize)
end

local function need(depth, n, fname, len, want, name)
    if len ~= nil and len < want then
        argerror(depth + 1, n, fname, fmt("%s holds %d elements, %d needed", name, len, want))
    end
end

---------------------------------------------------------------------------
-- module-level facts
---------------------------------------------------------------------------

function wisp.version()
    return ffi_str(C.wisp_version())
end

-- The calling thread's last C error message, the text and name of a status.
function wisp.errmsg() return ffi_str(C.wisp_errmsg()) end
function wisp.strerror(status) return ffi_str(C.wisp_strerror(status)) end
function wisp.err_name(status) return ffi_str(C.wisp_err_name(status)) end

function wisp.dtype_name(d)
    local s = C.wisp_dtype_name(check_dtype(1, 1, "dtype_name", d))
    return ffi_str(s)
end

---------------------------------------------------------------------------
-- engines
---------------------------------------------------------------------------

local function new_engine(threads)
    local rc = C.wisp_engine_new(threads, engine_box)
    if rc ~= 0 then return nil, last_error(rc, "engine") end
    local h = ffi_gc(engine_box[0], C.wisp_engine_free)
    engine_box[0] = nil
    return setmetatable({ _h = h }, Engine)
end

-- wisp.engine{threads = N}: a new engine (threads 0 or absent: one per core).
function wisp.engine(opts)
    local threads = 0
    if opts ~= nil then
        if type(opts) ~= "table" then expected(1, 1, "engine", "table", opts) end
        threads = check_uint(1, 1, "engine", opts.threads, "threads", 0)
        if threads > 0x7fffffff then argerror(1, 1, "engine", "threads: too many") end
    end
    return new_engine(threads)
end

local default_engine

-- The engine module-level calls use when given none, created on first use.
function wisp.default_engine()
    if default_engine == nil then
        local e, err = new_engine(0)
        if not e then return nil, err end
        default_engine = e
    end
    return default_engine
end

-- The engine object for an optional `engine` argument: nil means the
-- default engine. Returns the engine or nil, err; raises on a bad one.
local function resolve_engine(depth, n, fname, e)
    if e == nil then return wisp.default_engine() end
    if getmetatable(e) ~= Engine then expected(depth + 1, n, fname, "engine", e) end
    if e._h == nil then argerror(depth + 1, n, fname, "engine is closed") end
    return e
end

function Engine:threads()
    return C.wisp_engine_threads(handle(self, Engine, "engine", "threads"))
end

function Engine:gpu_count()
    return C.wisp_engine_gpu_count(handle(self, Engine, "engine", "gpu_count"))
end

function Engine:gpu_status()
    local s = C.wisp_engine_gpu_status(handle(self, Engine, "engine", "gpu_status"))
    return s ~= nil and ffi_str(s) or ""
end

-- The devices: { {name="cpu", kind="cpu", threads=N},
--   {name="gpu:0", kind="gpu", index=0, product="NVIDIA H200", memory=bytes,
--    capability=90, usable=true}, ... }, and as a second value (and the
-- list's field gpu_status) the GPU status in words ("no CUDA device" ...).
function Engine:devices()
    local h = handle(self, Engine, "engine", "devices")
    local list = { { name = "cpu", kind = "cpu", threads = C.wisp_engine_threads(h) } }
    local n = C.wisp_engine_gpu_count(h)
    for i = 0, n - 1 do
        local pname = C.wisp_engine_gpu_name(h, i)
        list[#list + 1] = {
            name = "gpu:" .. i,
            kind = "gpu",
            index = i,
            product = pname ~= nil and ffi_str(pname) or "",
            memory = tonumber(C.wisp_engine_gpu_memory(h, i)),
            capability = C.wisp_engine_gpu_capability(h, i),
            usable = C.wisp_engine_gpu_usable(h, i) ~= 0,
        }
    end
    local s = C.wisp_engine_gpu_status(h)
    local status = s ~= nil and ffi_str(s) or ""
    list.gpu_status = status
    return list, status
end

local log_levels = { debug = K.WISP_LOG_DEBUG, info = K.WISP_LOG_INFO, warn = K.WISP_LOG_WARN,
                     error = K.WISP_LOG_ERROR, off = K.WISP_LOG_OFF }

-- level: "debug", "info", "warn", "error", "off" or the WISP_LOG_* number.
function Engine:set_log_level(level)
    local h = handle(self, Engine, "engine", "set_log_level")
    local v = log_levels[level]
    if v == nil then
        if type(level) == "number" and level >= 0 and level <= K.WISP_LOG_OFF and level == floor(level) then
            v = level
        else
            argerror(1, 1, "set_log_level", "debug, info, warn, error or off expected, got " .. tostring(level))
        end
    end
    C.wisp_engine_set_log_level(h, v)
end

-- The last warning or error the engine logged, or nil.
function Engine:last_log()
    local h = handle(self, Engine, "engine", "last_log")
    local n = tonumber(C.wisp_engine_last_log(h, log_buf, log_buf_len))
    if n == 0 then return nil end
    if n >= log_buf_len then
        log_buf_len = n + 1
        log_buf = ffi_new("char[?]", log_buf_len)
        n = tonumber(C.wisp_engine_last_log(h, log_buf, log_buf_len))
        if n == 0 then return nil end
        if n >= log_buf_len then n = log_buf_len - 1 end
    end
    return ffi_str(log_buf, n)
end

function Engine:close()
    local h = self._h
    if getmetatable(self) ~= Engine then handle(self, Engine, "engine", "close") end
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_engine_free(h)
    if default_engine == self then default_engine = nil end
end

function Engine:is_closed() return self._h == nil end

---------------------------------------------------------------------------
-- models
---------------------------------------------------------------------------

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

-- wisp.import_liblinear(src, dst[, dtype]) -> true or nil, err
function wisp.import_liblinear(src, dst, dtype)
    if type(src) ~= "string" then expected(1, 1, "import_liblinear", "string", src) end
    if type(dst) ~= "string" then expected(1, 2, "import_liblinear", "string", dst) end
    local d = check_dtype(1, 3, "import_liblinear", dtype)
    local rc = C.wisp_import_liblinear(src, dst, d)
    if rc ~= 0 then return nil, last_error(rc, "import_liblinear") end
    return true
end

---------------------------------------------------------------------------
-- batches
---------------------------------------------------------------------------

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
    local h = ffi_gc(batch_box[0], C.wisp_batch_free)
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
    local h = handle(self, Batch, "batch", "bad_rows")
    local n = tonumber(C.wisp_batch_bad_count(h))
    local list = {}
    for i = 0, n - 1 do
        if C.wisp_batch_bad_row(h, i, size_box, u64_box, str_box) == 0 then
            list[#list + 1] = { row = tonumber(size_box[0]), line = tonumber(u64_box[0]),
                                msg = str_box[0] ~= nil and ffi_str(str_box[0]) or "" }
        end
    end
    return list
end

-- Copies of the CSR arrays as Lua tables (for inspection and tests):
-- {row_ptr={...}, ids={...}, val_ptr={...} or nil, vals={...} or nil}, all 1-based arrays.
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
    return {
        row_ptr = copy(C.wisp_batch_row_ptr(h), rows + 1) or {},
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

local function wrap(fname, e, rows, row_ptr, ids, val_ptr, vals)
    rows = check_uint(2, 1, fname, rows, "rows", nil)
    if rows == nil then argerror(2, 1, fname, "number of rows expected, got nil") end
    need(2, 2, fname, ffi_elems(2, 2, fname, row_ptr, u32p_probe, "uint32_t array", 4), rows + 1, "row_ptr")
    local nnz = tonumber(row_ptr[rows])
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
    local rc = C.wisp_batch_wrap(e._h, rows, row_ptr, ids, val_ptr, vals, batch_box)
    if rc ~= 0 then return nil, last_error(rc, fname) end
    local h = ffi_gc(batch_box[0], C.wisp_batch_free)
    batch_box[0] = nil
    local b = new_batch_object(h, e, true)
    b._refs = { row_ptr = row_ptr, ids = ids, val_ptr = val_ptr, vals = vals }
    return b
end

-- wisp.batch_from_ffi(rows, row_ptr, ids[, val_ptr][, vals][, engine])
-- A batch over FFI arrays without copies (the CSR layout of wisp.h: uint32
-- row_ptr[rows+1], uint32 ids, optional uint32 val_ptr[rows+1], optional
-- float vals). The batch keeps references to the arrays, so they live as
-- long as it does; they must not change while it is used. Pass nil for
-- val_ptr to give vals for every feature.
function wisp.batch_from_ffi(rows, row_ptr, ids, val_ptr, vals, eng)
    local e, err = resolve_engine(1, 6, "batch_from_ffi", eng)
    if not e then return nil, err end
    local b, berr = wrap("batch_from_ffi", e, rows, row_ptr, ids, val_ptr, vals)
    return b, berr
end

function Engine:batch_from_ffi(rows, row_ptr, ids, val_ptr, vals)
    handle(self, Engine, "engine", "batch_from_ffi")
    local b, err = wrap("batch_from_ffi", self, rows, row_ptr, ids, val_ptr, vals)
    return b, err
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

---------------------------------------------------------------------------
-- sessions
---------------------------------------------------------------------------

local function new_session(fname, model, device, ndev)
    if device == nil then device = "auto" end
    if type(device) ~= "string" then expected(2, ndev, fname, "string", device) end
    local e = model.engine
    if e._h == nil then error(fmt("calling '%s' on a model whose engine is closed", fname), 3) end
    local rc = C.wisp_session_new(e._h, model._h, device, session_box)
    if rc ~= 0 then return nil, last_error(rc, "session") end
    -- The handles of batches in flight on this session (submitted, not yet
    -- waited for): their own finalizers are detached while they are in
    -- flight, so the collector can never free one under the device; the
    -- session's finalizer finishes them (wisp_session_free does) and then
    -- gives each handle its finalizer back. This table is the finalizer's
    -- upvalue, never the session's cdata: the handle stays collectable.
    local inflight = {}
    local h = ffi_gc(session_box[0], function(sh)
        C.wisp_session_free(sh)
        for bh in pairs(inflight) do ffi_gc(bh, C.wisp_batch_free) end
    end)
    session_box[0] = nil
    return setmetatable({ _h = h, model = model, engine = e, _out = nil, _outcap = 0, _inflight = inflight },
                        Session)
end

-- The batch of a submit is done (its wait returned, or the session was
-- closed): it is the caller's again, with its finalizer back.
local function batch_landed(self, batch)
    local bh = batch._h
    batch._inflight = nil
    if bh ~= nil then
        self._inflight[bh] = nil
        ffi_gc(bh, C.wisp_batch_free)
    end
end

-- model:session([device]) -> session or nil, err. device: "cpu", "gpu",
-- "gpu:N", "gpus" or "auto" (the default).
function Model:session(device)
    handle(self, Model, "model", "session")
    local s, err = new_session("session", self, device, 1)
    return s, err
end

-- wisp.session(model[, device])
function wisp.session(model, device)
    if getmetatable(model) ~= Model then expected(1, 1, "session", "model", model) end
    if model._h == nil then argerror(1, 1, "session", "model is closed") end
    local s, err = new_session("session", model, device, 2)
    return s, err
end

-- The output array of score/score_raw (argument #2 of fname): out itself,
-- checked to hold `rows` floats, or (out == nil) the session's own array,
-- grown as needed and overwritten by the next call.
local function out_array(self, out, rows, fname, what)
    if out == nil then
        if rows > self._outcap or self._out == nil then
            local cap = max(rows, self._outcap * 2, 64)
            self._out = float_vla(cap)
            self._outcap = cap
        end
        return self._out
    end
    if not ffi_istype(float_ptr, out) then
        local len
        if ffi_istype(float_vla, out) then
            len = vla_floats(out)
        else
            len = ffi_elems(2, 2, fname, out, f32p_probe, "float array", 4)
        end
        if len ~= nil and len < rows then
            argerror(2, 2, fname, fmt("out holds %d floats, the %s has %d rows", len, what, rows))
        end
    end
    return out
end

-- session:score(batch[, out]) -> out, rows; or nil, err.
-- out: an FFI float array of at least batch:rows() elements; without it the
-- session's own array is returned, and THE NEXT score CALL ON THIS SESSION
-- OVERWRITES IT: copy what you keep (or use score_table). out[r] (0-based)
-- is row r's probability, NaN for a malformed input row.
function Session:score(batch, out)
    local h = handle(self, Session, "session", "score")
    if getmetatable(batch) ~= Batch then expected(1, 1, "score", "batch", batch) end
    local bh = batch._h
    if bh == nil then argerror(1, 1, "score", "batch is closed") end
    local rows = tonumber(C.wisp_batch_rows(bh))
    out = out_array(self, out, rows, "score", "batch")
    local rc = C.wisp_session_score(h, bh, out)
    if rc ~= 0 then return nil, last_error(rc, "score") end
    return out, rows
end

-- session:submit(batch, out) -> true; or nil, err.
-- Starts scoring batch into out (an FFI float array of at least batch:rows()
-- floats) and returns at once: on a GPU the copies and the kernel run while
-- the caller prepares the next batch (up to WISP_MAX_IN_FLIGHT on the
-- device). The batch and out belong to wisp until the matching wait: the
-- session keeps references to both so the garbage collector leaves them alone.
local done_box = ffi.new("const wisp_batch *[1]")
function Session:submit(batch, out)
    local h = handle(self, Session, "session", "submit")
    if getmetatable(batch) ~= Batch then expected(1, 1, "submit", "batch", batch) end
    if batch._h == nil then argerror(1, 1, "submit", "batch is closed") end
    if batch._inflight then
        argerror(1, 1, "submit", "batch is already submitted and not yet waited for (call session:wait() first)")
    end
    if type(out) ~= "cdata" then expected(1, 2, "submit", "float array", out) end
    local rows = tonumber(C.wisp_batch_rows(batch._h))
    if ffi_istype(float_vla, out) and vla_floats(out) < rows then
        argerror(1, 2, "submit", fmt("out holds %d floats, the batch has %d rows", vla_floats(out), rows))
    end
    local bh = batch._h
    local rc = C.wisp_session_submit(h, bh, out)
    if rc ~= 0 then return nil, last_error(rc, "submit") end
    -- in flight until its wait: refused by close/clear/add and a second
    -- submit, and out of the collector's reach (the session's finalizer
    -- owns the handle until then; see new_session)
    batch._inflight = self
    self._inflight[bh] = true
    ffi_gc(bh, nil)
    local q = self._pending
    if not q then q = { first = 1, last = 0 }; self._pending = q end
    q.last = q.last + 1
    q[q.last] = { batch, out }
    return true
end

-- session:wait() -> batch, out of the oldest submitted batch once it is scored;
-- or nil, err (nothing pending, or a failure).
function Session:wait()
    local h = handle(self, Session, "session", "wait")
    local q = self._pending
    if not q or q.first > q.last then return nil, "wait: nothing was submitted" end
    local rc = C.wisp_session_wait(h, done_box)
    local e = q[q.first]
    q[q.first] = nil
    q.first = q.first + 1
    batch_landed(self, e[1])
    if rc ~= 0 then return nil, last_error(rc, "wait") end
    return e[1], e[2]
end

-- session:score_table(batch) -> a Lua array of the rows' probabilities
-- (1-based: t[r + 1] is row r), a copy that later calls do not touch.
function Session:score_table(batch)
    handle(self, Session, "session", "score_table")
    if getmetatable(batch) ~= Batch then expected(1, 1, "score_table", "batch", batch) end
    if batch._h == nil then argerror(1, 1, "score_table", "batch is closed") end
    local out, rows = self:score(batch)
    if not out then return nil, rows end
    local t = {}
    for i = 0, rows - 1 do t[i + 1] = out[i] end
    return t
end

-- The transform node on this session's device (wisp.h section 6). raw: a transformer
-- (spec:transformer()) holding raw rows. On a GPU the raw columns are shipped and the
-- ids computed there; elsewhere it is wisp_transform.
local function raw_arg(raw, fname)
    local cols = package.loaded["wisp.columns"]
    if type(raw) ~= "table" or (cols and getmetatable(raw) ~= cols.Transformer) or raw._h == nil then
        argerror(1, 1, fname, "an open transformer (raw rows) expected")
    end
    return raw._h
end

-- session:transform(raw[, batch]) -> the batch (a new one when none is given) with one
-- row appended per raw row, the same ids as raw:transform() gives; or nil, err.
function Session:transform(raw, batch)
    local h = handle(self, Session, "session", "transform")
    local rh = raw_arg(raw, "transform")
    local err
    if batch == nil then
        batch, err = wisp.batch(self.engine)
        if not batch then return nil, err end
    elseif getmetatable(batch) ~= Batch or batch._h == nil then
        argerror(1, 2, "transform", "an open batch expected")
    end
    local rc = C.wisp_session_transform(h, rh, batch._h)
    if rc ~= 0 then return nil, last_error(rc, "transform") end
    return batch
end

-- session:score_raw(raw[, out]) -> out, rows; or nil, err. Raw rows straight to
-- probabilities (transform and score fused on a GPU: only raw columns cross PCIe).
-- out as for session:score (without it, the session's own array, overwritten by the
-- next call); NaN for a bad row.
function Session:score_raw(raw, out)
    local h = handle(self, Session, "session", "score_raw")
    local rh = raw_arg(raw, "score_raw")
    local rows = tonumber(C.wisp_raw_rows(rh))
    out = out_array(self, out, rows, "score_raw", "raw batch")
    local rc = C.wisp_session_score_raw(h, rh, out)
    if rc ~= 0 then return nil, last_error(rc, "score_raw") end
    return out, rows
end

function Session:set_device(device)
    local h = handle(self, Session, "session", "set_device")
    if type(device) ~= "string" then expected(1, 1, "set_device", "string", device) end
    local rc = C.wisp_session_set_device(h, device)
    if rc ~= 0 then return nil, last_error(rc, "set_device") end
    return true
end

-- The device asked for ("auto", "gpu:1"...).
function Session:device()
    return ffi_str(C.wisp_session_device(handle(self, Session, "session", "device")))
end

-- The device that scored the last batch ("cpu", "gpu:0", "gpus:2"; "" before any).
function Session:last_device()
    local s = C.wisp_session_last_device(handle(self, Session, "session", "last_device"))
    return s ~= nil and ffi_str(s) or ""
end

-- Statistic names, from the C library (iterated until NULL).
local stat_names, stat_index = {}, {}
do
    local i = 0
    while true do
        local s = C.wisp_stat_name(i)
        if s == nil then break end
        local name = ffi_str(s)
        stat_names[i] = name
        stat_index[name] = i
        i = i + 1
    end
end

-- {batches=, rows=, nnz=, out_of_range=, bad_rows=, fallbacks=, ns_parse=, ..., ns_total=, ...}
function Session:stats()
    local h = handle(self, Session, "session", "stats")
    local t = {}
    for i, name in pairs(stat_names) do
        t[name] = tonumber(C.wisp_session_stat(h, i))
    end
    return t
end

function Session:reset_stats()
    C.wisp_session_reset_stats(handle(self, Session, "session", "reset_stats"))
end

-- session:add_stat(name or WISP_STAT_* index, amount): for stages timed by the caller (e.g. "ns_parse").
function Session:add_stat(which, amount)
    local h = handle(self, Session, "session", "add_stat")
    local i = which
    if type(which) == "string" then i = stat_index[which] end
    if type(i) ~= "number" or stat_names[i] == nil then
        argerror(1, 1, "add_stat", "statistic name expected, got " .. tostring(which))
    end
    amount = check_uint(1, 2, "add_stat", amount, "amount", nil)
    if amount == nil then argerror(1, 2, "add_stat", "amount expected, got nil") end
    C.wisp_session_add_stat(h, i, amount)
end

function Session:close()
    if getmetatable(self) ~= Session then handle(self, Session, "session", "close") end
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_session_free(h)                 -- finishes every batch in flight (wisp.h)
    local q = self._pending
    if q then
        for i = q.first, q.last do batch_landed(self, q[i][1]) end
        self._pending = nil
    end
    self._out, self._outcap = nil, 0
end

function Session:is_closed() return self._h == nil end

-- wisp.devices([engine]) -> the device list of Engine:devices (default engine when none).
function wisp.devices(eng)
    local e, err = resolve_engine(1, 1, "devices", eng)
    if not e then return nil, err end
    local list, status = e:devices()
    return list, status
end

---------------------------------------------------------------------------
-- Vowpal Wabbit (wisp.h section 7, engine/vw.c)
---------------------------------------------------------------------------

local VW = {}; VW.__index = VW
wisp.VW = VW
local vw_box = ffi_new("wisp_vw *[1]")

local function new_vw_object(h)
    return setmetatable({ _h = ffi_gc(h, C.wisp_vw_free) }, VW)
end

-- wisp.vw([options]) -> VW hashing options from VW's command-line spelling
-- ("-b 18 -q ab --hash_seed 7 --noconstant"), or nil, err for an option
-- wisp does not support.
function wisp.vw(options)
    if options ~= nil and type(options) ~= "string" then expected(1, 1, "vw", "string", options) end
    local rc = C.wisp_vw_new(options, vw_box)
    if rc ~= 0 then return nil, last_error(rc, "vw") end
    return new_vw_object(vw_box[0])
end

-- model:vw() -> the hashing options kept in a model made by wisp.import_vw, or nil, err.
function Model:vw()
    local h = handle(self, Model, "model", "vw")
    local rc = C.wisp_vw_from_model(h, vw_box)
    if rc ~= 0 then return nil, last_error(rc, "vw") end
    return new_vw_object(vw_box[0])
end

function VW:options() return ffi_str(C.wisp_vw_options(handle(self, VW, "vw", "options"))) end
function VW:bits() return tonumber(C.wisp_vw_bits(handle(self, VW, "vw", "bits"))) end

-- vw:hash_namespace(name) -> the namespace's hash ("" or " ": the default namespace)
function VW:hash_namespace(name)
    local h = handle(self, VW, "vw", "hash_namespace")
    if type(name) ~= "string" then expected(1, 1, "hash_namespace", "string", name) end
    return tonumber(C.wisp_vw_hash_namespace(h, name, #name))
end

-- vw:hash_feature(name, ns_hash) -> the feature's weight index (masked to the bits)
function VW:hash_feature(name, ns_hash)
    local h = handle(self, VW, "vw", "hash_feature")
    if type(name) ~= "string" then expected(1, 1, "hash_feature", "string", name) end
    ns_hash = check_uint(1, 2, "hash_feature", ns_hash, "ns_hash", 0)
    return tonumber(C.wisp_vw_hash_feature(h, name, #name, ns_hash))
end

-- vw:hash_quadratic(h1, h2) -> the index of the quadratic feature of two hashes
function VW:hash_quadratic(h1, h2)
    local h = handle(self, VW, "vw", "hash_quadratic")
    h1 = check_uint(1, 1, "hash_quadratic", h1, "h1", nil)
    h2 = check_uint(1, 2, "hash_quadratic", h2, "h2", nil)
    if h1 == nil or h2 == nil then argerror(1, h1 == nil and 1 or 2, "hash_quadratic", "hash expected, got nil") end
    return tonumber(C.wisp_vw_hash_quadratic(h, h1, h2))
end

function VW:close()
    if getmetatable(self) ~= VW then handle(self, VW, "vw", "close") end
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_vw_free(h)
end

function VW:is_closed() return self._h == nil end

-- wisp.vw_murmur3(s[, seed]) and wisp.vw_hashstring(s[, seed]): VW's hashes of a string.
function wisp.vw_murmur3(s, seed)
    if type(s) ~= "string" then expected(1, 1, "vw_murmur3", "string", s) end
    return tonumber(C.wisp_vw_murmur3(s, #s, check_uint(1, 2, "vw_murmur3", seed, "seed", 0)))
end

function wisp.vw_hashstring(s, seed)
    if type(s) ~= "string" then expected(1, 1, "vw_hashstring", "string", s) end
    return tonumber(C.wisp_vw_hashstring(s, #s, check_uint(1, 2, "vw_hashstring", seed, "seed", 0)))
end

-- batch:parse_vw(vw, text[, {final=true, max_rows=0, line=0}])
-- batch:parse_vw(vw, ptr, len[, opts])        (text in FFI memory)
-- Appends the rows of Vowpal Wabbit text hashed under vw (wisp.vw or
-- model:vw()); the contract of parse_libsvm: returns rows_added, bytes
-- consumed and the line count after them, or nil, err. Malformed lines
-- become bad rows (see bad_rows), scored as NaN.
function Batch:parse_vw(vw, text, a3, a4)
    local h = growable(self, "parse_vw")
    if getmetatable(vw) ~= VW then expected(1, 1, "parse_vw", "vw options (wisp.vw or model:vw())", vw) end
    local vh = vw._h
    if vh == nil then argerror(1, 1, "parse_vw", "the vw options are closed") end
    local len, final, max_rows
    text, len, final, max_rows = text_args("parse_vw", 2, text, a3, a4)
    local before = C.wisp_batch_rows(h)
    local rc = C.wisp_batch_parse_vw(h, vh, text, len, final, max_rows, u64_box, size_box)
    if rc ~= 0 then return nil, last_error(rc, "parse_vw") end
    return tonumber(C.wisp_batch_rows(h) - before), tonumber(size_box[0]), tonumber(u64_box[0])
end

-- wisp.import_vw(src, dst[, dtype]) -> true or nil, err: a VW --readable_model
-- or --invert_hash file as a .wisp model (see `wisp import vw --help`).
function wisp.import_vw(src, dst, dtype)
    if type(src) ~= "string" then expected(1, 1, "import_vw", "string", src) end
    if type(dst) ~= "string" then expected(1, 2, "import_vw", "string", dst) end
    local d = check_dtype(1, 3, "import_vw", dtype)
    local rc = C.wisp_import_vw(src, dst, d)
    if rc ~= 0 then return nil, last_error(rc, "import_vw") end
    return true
end

wisp.stat_names = stat_names

-- The policy layer (issue 5), loaded on first use: wisp.calibrate, wisp.pipeline,
-- wisp.placement (lua/wisp/placement.lua), wisp.batcher (batcher.lua), wisp.profile (profile.lua).
local lazy = { calibrate = "wisp.placement", pipeline = "wisp.placement", placement = "wisp.placement",
               batcher = "wisp.batcher", profile = "wisp.profile" }
setmetatable(wisp, { __index = function(t, k)
    local mod = lazy[k]
    if mod == nil then return nil end
    require(mod)
    return rawget(t, k)
end })

return wisp
