-- session.lua — wisp's sessions (wisp.h section 5): placement on a device, score, submit/wait,
-- transform and score_raw, statistics.
--
-- Loaded by `require "wisp"` (init.lua): model:session, wisp.session and the Session class.

local ffi = require "ffi"
local base = require "wisp.base"
local batch = require "wisp.batch"
local model = require "wisp.model"
local raw = require "wisp.raw"

local C, wisp = base.C, base.wisp
local ffi_gc, ffi_str, ffi_istype = ffi.gc, ffi.string, ffi.istype
local type, tonumber, tostring, setmetatable, getmetatable = type, tonumber, tostring, setmetatable, getmetatable
local pairs = pairs
local max = math.max
local fmt = string.format
local argerror, expected, handle, check_uint = base.argerror, base.expected, base.handle, base.check_uint
local ffi_elems, last_error = base.ffi_elems, base.last_error
local session_box, done_box, batch_pending = base.session_box, base.done_box, base.batch_pending
local float_vla, float_ptr, f32p_probe, vla_floats = base.float_vla, base.float_ptr, base.f32p_probe, base.vla_floats
local Batch, Model, RawBatch, new_batch = batch.Batch, model.Model, raw.RawBatch, batch.new

local Session = {}; Session.__index = Session
wisp.Session = Session
base.register(Session, "session")

local M = { Session = Session }

local QCAP = base.K.WISP_MAX_PENDING      -- slots of the submit queue, as in C

local function new_session(fname, model, device, ndev)
    if device == nil then device = "auto" end
    if type(device) ~= "string" then expected(2, ndev, fname, "string", device) end
    local e = model.engine
    if e._h == nil then error(fmt("calling '%s' on a model whose engine is closed", fname), 3) end
    local rc = C.wisp_session_new(e._h, model._h, device, session_box)
    if rc ~= 0 then return nil, last_error(rc, "session") end
    -- The handles of batches in flight on this session (submitted, not yet
    -- waited for), also held by base.batch_pending so the collector never frees
    -- one under the device; the session's finalizer finishes them
    -- (wisp_session_free) and releases them (base.session_gc). This table is the
    -- finalizer's upvalue, never the session's cdata: the handle stays collectable.
    local inflight = {}
    local h = ffi_gc(session_box[0], base.session_gc(inflight))
    session_box[0] = nil
    -- _qb/_qo/_qhead/_qn: the batches submitted and not yet waited for, and their
    -- outs, in submit order: a ring of WISP_MAX_PENDING slots mirroring the C one
    return setmetatable({ _h = h, model = model, engine = e, _out = nil, _outcap = 0, _inflight = inflight,
                          _qb = {}, _qo = {}, _qhead = 0, _qn = 0 }, Session)
end

-- The batch of a submit is done (its wait returned, or the session was
-- closed): it is the caller's again, collectable again.
local function batch_landed(self, batch)
    local bh = batch._h
    batch._inflight = nil
    if bh ~= nil then
        self._inflight[bh] = nil
        batch_pending[bh] = nil
    end
end

-- wisp.device_parse(name) -> kind ("cpu", "gpu", "gpus" or "auto"), n (the N of gpu:N or
-- gpus:N; 0 for gpu and gpus); or nil, err for a name outside the device grammar. The
-- grammar is C's (wisp_device_parse), the one sessions use; the machine is not asked.
local device_kinds = { [0] = "cpu", "gpu", "gpus", "auto" }
local kind_box, n_box = base.int_box, base.int_box2
function wisp.device_parse(name)
    if type(name) ~= "string" then expected(1, 1, "device_parse", "string", name) end
    local rc = C.wisp_device_parse(name, kind_box, n_box)
    if rc ~= 0 then return nil, last_error(rc) end
    return device_kinds[kind_box[0]], n_box[0]
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
    -- submit, and out of the collector's reach (see new_session)
    batch._inflight = self
    self._inflight[bh] = true
    batch_pending[bh] = true
    -- the mirror of the C ring (wisp_session_wait returns them in this order)
    local n = self._qn
    local slot = (self._qhead + n) % QCAP
    self._qb[slot], self._qo[slot] = batch, out
    self._qn = n + 1
    return true
end

-- session:wait() -> batch, out of the oldest submitted batch once it is scored;
-- or nil, err (nothing pending, or a failure). The session's queue is the C ring's
-- mirror: the batch returned is the one wisp_session_wait completed.
function Session:wait()
    local h = handle(self, Session, "session", "wait")
    if self._qn == 0 then return nil, "wait: nothing was submitted" end
    local rc = C.wisp_session_wait(h, done_box)
    local head = self._qhead
    local b, out = self._qb[head], self._qo[head]
    self._qb[head], self._qo[head] = nil, nil
    self._qhead, self._qn = (head + 1) % QCAP, self._qn - 1
    local done = done_box[0]
    done_box[0] = nil
    batch_landed(self, b)
    if rc ~= 0 then return nil, last_error(rc, "wait") end
    if done ~= b._h then
        return nil, "wait: the session's queue and the C ring disagree (a submit or wait of this session went around its Lua object)"
    end
    return b, out
end

-- session:pending() -> the number of batches submitted and not yet waited for.
function Session:pending()
    handle(self, Session, "session", "pending")
    return self._qn
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

-- The transform stage on this session's device (wisp.h section 6). raw: a raw batch
-- (description:raw_batch()). On a GPU the raw columns are shipped and the ids
-- computed there; elsewhere it is wisp_transform.
local function raw_arg(r, fname)
    if getmetatable(r) ~= RawBatch or r._h == nil then
        argerror(2, 1, fname, "an open raw batch expected, got " .. (type(r) == "table" and getmetatable(r) == RawBatch
                                                                    and "a closed raw batch" or base.typename(r)))
    end
    return r._h
end

-- session:transform(raw[, batch]) -> the batch (a new one when none is given) with one
-- row appended per raw row, the same ids as raw:transform() gives; or nil, err.
function Session:transform(raw, batch)
    local h = handle(self, Session, "session", "transform")
    local rh = raw_arg(raw, "transform")
    local err
    if batch == nil then
        batch, err = new_batch(self.engine)
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

-- session:bad_count() and session:bad_rows() -> the bad rows of the last score_raw on
-- this session, whatever the device: the raw batch's own and those its transform
-- refused, with the transform's messages ({row=, line=, msg=}, 0-based rows), so a
-- caller never runs the transform again to explain a NaN. Valid until the next score_raw.
function Session:bad_count()
    return tonumber(C.wisp_session_bad_count(handle(self, Session, "session", "bad_count")))
end

function Session:bad_rows()
    return base.bad_rows(handle(self, Session, "session", "bad_rows"), C.wisp_session_bad_count, C.wisp_session_bad_row)
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

local NSTAT = #stat_names + 1

-- session:set_profiling(on): the per-call record (last_stat, last_stats) on or off (off by default).
function Session:set_profiling(on)
    C.wisp_session_set_profiling(handle(self, Session, "session", "set_profiling"), on and 1 or 0)
end

function Session:profiling()
    return C.wisp_session_profiling(handle(self, Session, "session", "profiling")) ~= 0
end

-- session:last_stat(i) -> what the last score/submit/wait added to statistic i (a
-- WISP_STAT_* index: wisp.stat_index[name]); 0 when profiling is off. The hot-path
-- form of last_stats: a number, nothing allocated.
function Session:last_stat(i)
    return tonumber(C.wisp_session_last_stat(handle(self, Session, "session", "last_stat"), i))
end

-- session:last_stats() -> what the last score/submit/wait added to each statistic
-- ({ns_kernel=, bytes_h2d=, rows=, ...}) plus start_ns (wisp_clock_ns clock); nil
-- when profiling is off.
function Session:last_stats()
    local h = handle(self, Session, "session", "last_stats")
    if C.wisp_session_profiling(h) == 0 then return nil end
    local t = { start_ns = tonumber(C.wisp_session_last_start_ns(h)) }
    for i = 0, NSTAT - 1 do t[stat_names[i]] = tonumber(C.wisp_session_last_stat(h, i)) end
    return t
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
    for k = 0, self._qn - 1 do
        local slot = (self._qhead + k) % QCAP
        batch_landed(self, self._qb[slot])
        self._qb[slot], self._qo[slot] = nil, nil
    end
    self._qhead, self._qn = 0, 0
    self._out, self._outcap = nil, 0
end

function Session:is_closed() return self._h == nil end
wisp.stat_names = stat_names      -- [i] = name, i from 0 (WISP_STAT_*)
wisp.stat_index = stat_index      -- [name] = i

return M
