-- engine.lua — wisp's engines (wisp.h section 2): threads, devices, logging, and the default engine.
--
-- Loaded by `require "wisp"` (init.lua); the functions land in the wisp table:
-- wisp.engine{threads=}, wisp.default_engine(), wisp.devices([engine]).

local ffi = require "ffi"
local base = require "wisp.base"

local C, K, wisp = base.C, base.K, base.wisp
local ffi_new, ffi_gc, ffi_str = ffi.new, ffi.gc, ffi.string
local type, tonumber, tostring, setmetatable, getmetatable = type, tonumber, tostring, setmetatable, getmetatable
local floor = math.floor
local argerror, expected, handle, check_uint = base.argerror, base.expected, base.handle, base.check_uint
local last_error, engine_box = base.last_error, base.engine_box

local log_buf_len = 512
local log_buf     = ffi_new("char[?]", log_buf_len)

local Engine = {}; Engine.__index = Engine
wisp.Engine = Engine
base.register(Engine, "engine")

local M = { Engine = Engine }

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


-- wisp.devices([engine]) -> the device list of Engine:devices (default engine when none).
function wisp.devices(eng)
    local e, err = resolve_engine(1, 1, "devices", eng)
    if not e then return nil, err end
    local list, status = e:devices()
    return list, status
end

M.resolve = resolve_engine
return M
