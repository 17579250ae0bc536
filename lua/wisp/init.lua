-- init.lua — `local wisp = require "wisp"`: engines, models, batches, raw batches and sessions over the C API of engine/include/wisp.h.
--
-- This file assembles the wisp table from one module per object:
--   wisp.base     the library handle, out-parameter boxes, the error formatter, argument checks
--   wisp.engine   engines and devices          wisp.model    models: load, write, import
--   wisp.batch    batches (batch_wrap ...)     wisp.raw      raw batches (the transform's input)
--   wisp.session  sessions: score, submit/wait, transform, score_raw, statistics
--   wisp.vw       Vowpal Wabbit hashing and parsing
-- and loads the policy layer on first use (wisp.placement, wisp.pipeline, wisp.calibrate,
-- wisp.batcher, wisp.profile); wisp.columns (column descriptions) is required by name.
--
-- Conventions (those of lua-resty-core):
-- * Caller mistakes (wrong argument types, use of a closed object) raise
--   "bad argument #N to 'fn' (...)" errors at the caller's line.
-- * Runtime failures (a missing or malformed file, a device failure, a
--   limit) return nil, "context: reason", the reason coming from wisp_errmsg().
-- * Every C handle is owned by one cdata with an ffi.gc finalizer; :close()
--   detaches the finalizer and frees now; a closed object raises when used.
-- * Hot paths allocate nothing: batch scratch arrays and session output
--   arrays are allocated once per object and grown geometrically; the
--   out-parameter boxes are wisp.base's.
-- * Ids are the model's 0-based feature ids, whatever Lua's 1-based arrays:
--   batch:add{0, 7} is a row with features 0 and 7. Row indices reported
--   by wisp (bad_rows) are 0-based too, like the FFI output arrays.

local ffi = require "ffi"
local base = require "wisp.base"

local C, wisp = base.C, base.wisp
local ffi_str = ffi.string
local rawget, require, tonumber = rawget, require, tonumber

require "wisp.engine"
require "wisp.model"
require "wisp.batch"
require "wisp.raw"
require "wisp.session"
require "wisp.vw"

function wisp.version()
    return ffi_str(C.wisp_version())
end

-- The calling thread's last C error message, the text and name of a status.
function wisp.errmsg() return ffi_str(C.wisp_errmsg()) end
function wisp.strerror(status) return ffi_str(C.wisp_strerror(status)) end
function wisp.err_name(status) return ffi_str(C.wisp_err_name(status)) end

-- wisp.clock_ns() -> the engine's monotonic clock in ns (wisp_clock_ns: the clock of
-- the profiles' start_ns), as a number; wisp.clock() -> the same in seconds.
function wisp.clock_ns() return tonumber(C.wisp_clock_ns()) end
function wisp.clock() return tonumber(C.wisp_clock_ns()) * 1e-9 end

function wisp.dtype_name(d)
    local s = C.wisp_dtype_name(base.check_dtype(1, 1, "dtype_name", d))
    return ffi_str(s)
end

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
