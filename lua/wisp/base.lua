-- base.lua — what every wisp Lua module shares (as lua-resty-core's resty.core.base): the library
-- handle, the out-parameter boxes, the one error formatter and the argument checks.
--
-- A Lua state runs one call at a time, so one box of each type serves every module:
-- a function fills a box with its C call and reads it back before it returns (never
-- across a yield). Boxes hold NULL between calls, so they keep nothing alive.
--
-- Errors (lua-resty-core's convention, the only one in wisp's Lua layer):
-- * a caller mistake raises "bad argument #N to 'fn' (...)" at the caller's line
--   (argerror, expected; `depth` is the number of wisp frames between the function
--   that checks and the user's code: 1 when the public function itself checks);
-- * a runtime failure returns nil, "context: reason" with the reason from
--   wisp_errmsg() (last_error), context added as the error rises.

local ffi = require "ffi"
local C = require "wisp.cdef"
local K = require "wisp.const"

local ffi_new, ffi_str, ffi_typeof, ffi_sizeof = ffi.new, ffi.string, ffi.typeof, ffi.sizeof
local type, error, tostring, pcall, getmetatable, pairs = type, error, tostring, pcall, getmetatable, pairs
local floor = math.floor
local fmt = string.format

local M = { C = C, K = K }

-- The public table that `require "wisp"` returns: each object module (engine.lua,
-- model.lua, batch.lua, session.lua, raw.lua, vw.lua) adds its functions to it.
M.wisp = { _VERSION = ffi_str(C.wisp_version()), const = K }

---------------------------------------------------------------------------
-- types and out-parameter boxes
---------------------------------------------------------------------------

M.uint64_vla = ffi_typeof("uint64_t[?]")
M.uint32_vla = ffi_typeof("uint32_t[?]")
M.float_vla  = ffi_typeof("float[?]")
M.double_vla = ffi_typeof("double[?]")
M.float_ptr  = ffi_typeof("float *")
M.const_char_ptr = ffi_typeof("const char *")

-- handle boxes: `wisp_x **out` of the constructors
M.engine_box  = ffi_new("wisp_engine *[1]")
M.model_box   = ffi_new("wisp_model *[1]")
M.batch_box   = ffi_new("wisp_batch *[1]")
M.session_box = ffi_new("wisp_session *[1]")
M.columns_box = ffi_new("wisp_columns *[1]")
M.raw_box     = ffi_new("wisp_raw *[1]")
M.vw_box      = ffi_new("wisp_vw *[1]")
M.done_box    = ffi_new("const wisp_batch *[1]")   -- wisp_session_wait's batch
-- value boxes
M.size_box    = ffi_new("size_t[1]")
M.int_box     = ffi_new("int[1]")
M.int_box2    = ffi_new("int[1]")
M.u64_box     = ffi_new("uint64_t[1]")
M.str_box     = ffi_new("const char *[1]")
M.u32p_box    = ffi_new("const uint32_t *[1]")
M.voidp_box   = ffi_new("const void *[1]")
M.u32p_box2   = ffi_new("const uint32_t *[1]")
-- conversion probes: assigning checks a cdata's type like a C call would
M.u32p_probe  = ffi_new("const uint32_t *[1]")
M.f32p_probe  = ffi_new("const float *[1]")

-- ffi.sizeof of a VLA is not compiled by the JIT: remember each output array's
-- length once (weak keys), so the scoring path stays on trace.
local vla_len = setmetatable({}, { __mode = "k" })
function M.vla_floats(a)
    local n = vla_len[a]
    if n == nil then n = ffi_sizeof(a) / 4; vla_len[a] = n end
    return n
end

---------------------------------------------------------------------------
-- batches in flight (session.lua's submit/wait) and the batch finalizer
---------------------------------------------------------------------------

-- A batch submitted and not yet waited for belongs to its session (wisp.h): the
-- collector must not free it under the device. batch_pending holds its handle (a
-- strong key: reachable, so never collected while in flight); when every finalizer
-- runs at once (lua_close runs them all, in no order) batch_gc only marks an
-- in-flight handle dead and the session's finalizer frees it after wisp_session_free
-- has finished it (session_gc). Re-attaching finalizers from a finalizer does not
-- work there: LuaJIT disables the finalizer table at close, so such a batch would
-- leak, keep its engine (and its pool threads) alive, and crash the process when the
-- library is unloaded under those threads.
local batch_pending, batch_dead = {}, {}
M.batch_pending = batch_pending

function M.batch_gc(bh)
    if batch_pending[bh] then batch_dead[bh] = true else C.wisp_batch_free(bh) end
end

-- The finalizer of a session whose in-flight batch handles are the keys of `inflight`.
function M.session_gc(inflight)
    return function(sh)
        C.wisp_session_free(sh)                -- finishes every batch in flight
        for bh in pairs(inflight) do
            batch_pending[bh] = nil
            if batch_dead[bh] then batch_dead[bh] = nil; C.wisp_batch_free(bh) end
        end
    end
end

---------------------------------------------------------------------------
-- errors
---------------------------------------------------------------------------

-- The message for a failed C call: wisp_errmsg(), else the status text; "context: "
-- before it when a context is given.
local function last_error(rc, context)
    local msg = ffi_str(C.wisp_errmsg())
    if msg == "" then msg = ffi_str(C.wisp_strerror(rc)) end
    if context then return context .. ": " .. msg end
    return msg
end
M.last_error = last_error
-- base.errmsg(rc) -> the message of a failed call without a context (wisp_errmsg, else
-- the status text): for callers that make the C call themselves
function M.errmsg(rc) return last_error(rc) end

-- metatable -> the word for its objects in messages ("engine", "raw batch", ...);
-- each module registers its classes.
local type_names = {}
function M.register(mt, name) type_names[mt] = name end

local function typename(v)
    local t = type(v)
    if t == "table" then
        local name = type_names[getmetatable(v)]
        if name then return name end
    elseif t == "cdata" then
        return tostring(ffi_typeof(v)):match("^ctype<(.*)>$") or "cdata"
    end
    return t
end
M.typename = typename

-- Raise "bad argument #n to 'fname' (msg)" at the user's line. Never tail-call it.
local function argerror(depth, n, fname, msg)
    error(fmt("bad argument #%d to '%s' (%s)", n, fname, msg), depth + 2)
end
M.argerror = argerror

local function expected(depth, n, fname, what, v)
    error(fmt("bad argument #%d to '%s' (%s expected, got %s)", n, fname, what, typename(v)), depth + 2)
end
M.expected = expected

-- The handle of a method's self, raising at the caller of the method on a wrong or
-- closed self ("calling 'rows' on a closed batch").
function M.handle(self, mt, what, fname)
    if getmetatable(self) ~= mt then
        error(fmt("calling '%s' on bad self (%s expected, got %s)", fname, what, typename(self)), 3)
    end
    local h = self._h
    if h == nil then
        error(fmt("calling '%s' on a closed %s", fname, what), 3)
    end
    return h
end

---------------------------------------------------------------------------
-- argument checks
---------------------------------------------------------------------------

function M.check_uint(depth, n, fname, v, name, default)
    if v == nil then return default end
    if type(v) ~= "number" or v < 0 or v ~= floor(v) or v >= 2^53 then
        argerror(depth + 1, n, fname, fmt("%s: non-negative integer expected, got %s", name, tostring(v)))
    end
    return v
end

function M.check_dtype(depth, n, fname, d)
    if d == nil then return K.WISP_F32 end
    if type(d) == "string" then
        local v = C.wisp_dtype_parse(d)
        if v < 0 then argerror(depth + 1, n, fname, fmt("unknown dtype '%s' (use f32, f16 or i8)", d)) end
        return v
    end
    if d == K.WISP_F32 or d == K.WISP_F16 or d == K.WISP_I8 then return d end
    argerror(depth + 1, n, fname, fmt("dtype expected (f32, f16 or i8), got %s", tostring(d)))
end

-- Elements in an FFI array (nil for a pointer: unknown). Raises unless v converts
-- to `const T *` (probe: a `const T *[1]` box).
function M.ffi_elems(depth, n, fname, v, probe, what, esize)
    if type(v) ~= "cdata" or not pcall(function() probe[0] = v end) then
        expected(depth + 1, n, fname, what, v)
    end
    probe[0] = nil
    if tostring(ffi_typeof(v)):find("%*") then return nil end
    local size = ffi_sizeof(v)
    if size == nil then return nil end
    return floor(size / esize)
end

function M.need(depth, n, fname, len, want, name)
    if len ~= nil and len < want then
        argerror(depth + 1, n, fname, fmt("%s holds %d elements, %d needed", name, len, want))
    end
end

-- The bad rows of a batch or raw batch as {row=, line=, msg=} (0-based rows), through
-- its count and row accessors (wisp_batch_bad_* or wisp_raw_bad_*).
function M.bad_rows(h, count_fn, row_fn)
    local list = {}
    local size_box, u64_box, str_box = M.size_box, M.u64_box, M.str_box
    for i = 0, tonumber(count_fn(h)) - 1 do
        if row_fn(h, i, size_box, u64_box, str_box) == 0 then
            list[#list + 1] = { row = tonumber(size_box[0]), line = tonumber(u64_box[0]),
                                msg = str_box[0] ~= nil and ffi_str(str_box[0]) or "" }
        end
    end
    str_box[0] = nil
    return list
end

return M
