-- profile.lua — the per-stage profiler: a record per scoring call, a stage table, and Chrome/Perfetto
-- trace JSON (stages: parse, transform, h2d, kernel, d2h, sync, overhead; bytes).
--
--   local prof = wisp.profile(function() ... pipe:score(b) ... end, { path = "trace.json" })
--   print(prof:table())                      -- the stage breakdown
--   -- open trace.json in https://ui.perfetto.dev or chrome://tracing
--
-- How: while a profile runs, Session.score / submit / wait and Batch.parse_libsvm are
-- wrapped, and each session used gets the C profile switched on
-- (wisp_session_set_profiling): every call then records what it added to each
-- statistic and when it started, and the wrapper reads that record (18 FFI reads and
-- one Lua table a call). When no profile runs, nothing is wrapped and the C profile is
-- off: the hot path pays one predictable branch in session.c per call.
--
-- The trace: one process "wisp"; tracks (threads) for the calling Lua thread (each call,
-- its transform, its sync wait and the engine's own overhead; parse), for the CPU
-- scoring (the engine's thread pool works inside the call) and, per GPU device, one for
-- each stream stage: h2d (copy), kernel (compute), d2h (copy). Stage durations are
-- measured; their placement inside the call is in pipeline order (transform, h2d,
-- kernel, d2h, sync, then overhead at the end), since the library keeps durations,
-- not per-stage timestamps. With submit/wait the device stages of a batch are counted
-- by the wait that completes it, and batches overlap each other: those stages can
-- add up to more than the wait's wall time (see wisp.h, section 5).
local ffi = require "ffi"
local wisp = require "wisp"
local C = require "wisp.cdef"

local fmt, concat = string.format, table.concat
local tonumber, pairs, ipairs, type, tostring = tonumber, pairs, ipairs, type, tostring
local max = math.max

local M = {}
local Session, Batch = wisp.Session, wisp.Batch

local names = wisp.stat_names
local NSTAT = #names + 1
M.stat_names = names

-- the stages of a call, in pipeline order, and their tracks
M.STAGES = { "parse", "transform", "h2d", "kernel", "d2h", "sync", "overhead" }

-- session:set_profiling, :profiling, :last_stat and :last_stats (the C profile of a
-- call) are the session's own methods (session.lua).

---------------------------------------------------------------------------
-- the stage table
---------------------------------------------------------------------------

local function human_bytes(b)
    if b >= 1e9 then return fmt("%.2f GB", b / 1e9) end
    if b >= 1e6 then return fmt("%.2f MB", b / 1e6) end
    if b >= 1e3 then return fmt("%.1f kB", b / 1e3) end
    return fmt("%d B", b)
end
M.human_bytes = human_bytes

-- A stage breakdown as text, from a stats table (session:stats(), or sums of records):
-- per stage the total, the time per batch and the share of the wall time.
function M.stage_table(st, title)
    local batches = max(st.batches or 0, 1)
    local wall = st.ns_total or 0
    local lines = {}
    if title then lines[1] = title end
    lines[#lines + 1] = fmt("%-10s %12s %14s %8s", "stage", "total ms", "per batch us", "% wall")
    for _, s in ipairs(M.STAGES) do
        local v = st["ns_" .. s] or 0
        if v > 0 or s ~= "parse" then
            lines[#lines + 1] = fmt("%-10s %12.3f %14.2f %7.1f%%", s, v / 1e6, v / 1e3 / batches, wall > 0 and 100 * v / wall or 0)
        end
    end
    lines[#lines + 1] = fmt("%-10s %12.3f %14.2f %7.1f%%", "wall", wall / 1e6, wall / 1e3 / batches, 100)
    lines[#lines + 1] = fmt("%d batches, %d rows (%.1f rows a batch), h2d %s, d2h %s, fallbacks %d",
                            st.batches or 0, st.rows or 0, (st.rows or 0) / batches,
                            human_bytes(st.bytes_h2d or 0), human_bytes(st.bytes_d2h or 0), st.fallbacks or 0)
    if (st.ns_kernel or 0) > 0 and wall > 0 then
        lines[#lines + 1] = fmt("kernel / wall = %.1f%% (device utilization on a GPU)", 100 * st.ns_kernel / wall)
    end
    return concat(lines, "\n")
end

---------------------------------------------------------------------------
-- profiles
---------------------------------------------------------------------------

local function K_index(name)
    for i = 0, NSTAT - 1 do if names[i] == name then return i end end
    error("profile: no statistic " .. name)
end

local Profile = {}; Profile.__index = Profile
M.Profile = Profile
local active = nil

-- Records live in one FFI array of doubles, STRIDE a call: kind, session, device,
-- start_ns, then the NSTAT statistics; Lua tables are made only when asked (records()).
local STRIDE = 4 + NSTAT
local KINDS = { "score", "submit", "wait", "parse" }
local KIND_ID = { score = 1, submit = 2, wait = 3, parse = 4 }
local u32p = ffi.typeof("const uint32_t *")

-- M.start([opts]) -> a running profile. opts.max_records (default 1e6): beyond it,
-- calls are counted (prof.dropped) but not kept.
function M.start(opts)
    opts = opts or {}
    if active then error("wisp.profile: a profile is already running (stop it first)", 2) end
    local self = setmetatable({ n = 0, cap = 0, buf = nil, dropped = 0, max_records = opts.max_records or 1e6,
                                sessions = {}, nsessions = 0, t0_ns = tonumber(C.wisp_clock_ns()),
                                saved = {}, opts = opts, devnames = { "cpu" }, devkey = {} }, Profile)
    local function sid_of(sess, h)
        local e = self.sessions[sess]
        if not e then
            self.nsessions = self.nsessions + 1
            e = { id = self.nsessions, was_on = C.wisp_session_profiling(h) ~= 0 }
            self.sessions[sess] = e
            C.wisp_session_set_profiling(h, 1)
        end
        return e.id
    end
    local function slot()
        local n = self.n
        if n >= self.max_records then self.dropped = self.dropped + 1; return nil end
        if n >= self.cap then
            local cap = math.min(math.max(1024, self.cap * 2), self.max_records)
            local nb = ffi.new("double[?]", cap * STRIDE)
            if self.buf ~= nil and n > 0 then ffi.copy(nb, self.buf, n * STRIDE * 8) end
            self.buf, self.cap = nb, cap
        end
        self.n = n + 1
        return n * STRIDE
    end
    -- the device of the last call, interned by its first bytes ("cpu", "gpu:0", "gpus:2")
    local function device_id(h)
        local p = C.wisp_session_last_device(h)
        if p == nil then return 0 end
        local w = ffi.cast(u32p, p)
        local key = w[0] * 65536 + w[1] % 65536
        local id = self.devkey[key]
        if not id then
            self.devnames[#self.devnames + 1] = ffi.string(p)
            id = #self.devnames
            self.devkey[key] = id
        end
        return id
    end
    local function wrap(name)
        local orig = Session[name]
        local kind = KIND_ID[name]
        self.saved[name] = orig
        Session[name] = function(sess, a, b)
            local h = sess._h
            if h ~= nil and getmetatable(sess) == Session then
                local sid = sid_of(sess, h)
                local r1, r2 = orig(sess, a, b)
                if r1 then
                    local o = slot()
                    if o then
                        local buf = self.buf
                        buf[o], buf[o + 1], buf[o + 2] = kind, sid, device_id(h)
                        buf[o + 3] = tonumber(C.wisp_session_last_start_ns(h))
                        for i = 0, NSTAT - 1 do buf[o + 4 + i] = tonumber(C.wisp_session_last_stat(h, i)) end
                    end
                end
                return r1, r2
            end
            return orig(sess, a, b)
        end
    end
    wrap("score"); wrap("submit"); wrap("wait")
    local parse = Batch.parse_libsvm
    self.saved_parse = parse
    local I_PARSE, I_TOTAL, I_ROWS = 4 + K_index("ns_parse"), 4 + K_index("ns_total"), 4 + K_index("rows")
    Batch.parse_libsvm = function(b, ...)
        local t0 = tonumber(C.wisp_clock_ns())
        local n, used, line = parse(b, ...)
        local dt = tonumber(C.wisp_clock_ns()) - t0
        local o = slot()
        if o then
            local buf = self.buf
            for i = 0, STRIDE - 1 do buf[o + i] = 0 end
            buf[o], buf[o + 1], buf[o + 2], buf[o + 3] = 4, 0, 1, t0
            buf[o + I_PARSE], buf[o + I_TOTAL], buf[o + I_ROWS] = dt, dt, n or 0
        end
        return n, used, line
    end
    active = self
    return self
end

-- The records as Lua tables: {name = "score"|"submit"|"wait"|"parse", session = N,
-- device = "cpu"|"gpu:0"..., start_ns = , ns_kernel = , bytes_h2d = , rows = , ...}.
-- For a parse record, rows is the number of rows parsed (parsed_rows) and batches 0.
function Profile:records()
    if self._records and self._records_n == self.n then return self._records end
    local list = {}
    local buf = self.buf
    for k = 0, self.n - 1 do
        local o = k * STRIDE
        local r = { name = KINDS[buf[o]], session = buf[o + 1], device = self.devnames[buf[o + 2]] or "",
                    start_ns = buf[o + 3] }
        for i = 0, NSTAT - 1 do r[names[i]] = buf[o + 4 + i] end
        if r.name == "parse" then r.parsed_rows = r.rows; r.rows = 0 end
        list[k + 1] = r
    end
    self._records, self._records_n = list, self.n
    return list
end

-- Stop recording: the wrappers are removed and the C profile of the sessions it switched
-- on is switched off again.
function Profile:stop()
    if active ~= self then return self end
    for name, f in pairs(self.saved) do Session[name] = f end
    Batch.parse_libsvm = self.saved_parse
    for sess, e in pairs(self.sessions) do
        if not e.was_on and sess._h ~= nil then C.wisp_session_set_profiling(sess._h, 0) end
    end
    self.t1_ns = tonumber(C.wisp_clock_ns())
    active = nil
    return self
end

function M.active() return active end

-- Sums over the records, in session:stats() form (parse included).
function Profile:totals()
    local t = {}
    for i = 0, NSTAT - 1 do t[names[i]] = 0 end
    for _, r in ipairs(self:records()) do
        for i = 0, NSTAT - 1 do local k = names[i]; t[k] = t[k] + (r[k] or 0) end
    end
    return t
end

function Profile:table(title)
    return M.stage_table(self:totals(), title)
end

-- For each call record: |sum of its stages - its wall time| / wall time. Returns the
-- worst ratio, and the number of records looked at (calls with rows and at least 1 µs).
function Profile:stage_sum_error()
    local worst, n = 0, 0
    for _, r in ipairs(self:records()) do
        if r.name ~= "parse" and (r.ns_total or 0) >= 1000 and (r.rows or 0) > 0 then
            local sum = 0
            for _, s in ipairs(M.STAGES) do sum = sum + (r["ns_" .. s] or 0) end
            local e = math.abs(sum - r.ns_total) / r.ns_total
            if e > worst then worst = e end
            n = n + 1
        end
    end
    return worst, n
end

---------------------------------------------------------------------------
-- the trace (Chrome trace event format, "X" complete events; Perfetto reads it)
---------------------------------------------------------------------------

local function gpu_tracks(dev)   -- "gpu:0" -> base tid for its three stream tracks
    local n = dev:match("^gpu:(%d+)$")
    if n then return 100 + 10 * tonumber(n) end
    local k = dev:match("^gpus:(%d+)$")
    if k then return 1000 end
    return nil
end

-- The trace as a Lua table {traceEvents = {...}, displayTimeUnit = "ns", otherData = {...}}.
function Profile:trace()
    local ev = {}
    local tracks = {}
    local function track(tid, name)
        if not tracks[tid] then
            tracks[tid] = true
            ev[#ev + 1] = { name = "thread_name", ph = "M", pid = 1, tid = tid, args = { name = name } }
            ev[#ev + 1] = { name = "thread_sort_index", ph = "M", pid = 1, tid = tid, args = { sort_index = tid } }
        end
    end
    ev[1] = { name = "process_name", ph = "M", pid = 1, tid = 0, args = { name = "wisp" } }
    local t0 = self.t0_ns
    for _, r in ipairs(self:records()) do if r.start_ns > 0 and r.start_ns < t0 then t0 = r.start_ns end end
    local function us(ns) return (ns - t0) / 1e3 end
    local function x(tid, name, start_ns, dur_ns, args, cat)
        ev[#ev + 1] = { name = name, cat = cat or "wisp", ph = "X", pid = 1, tid = tid,
                        ts = us(start_ns), dur = dur_ns / 1e3, args = args }
    end
    local nthreads = 0
    for sess in pairs(self.sessions) do
        if sess.engine and sess.engine._h ~= nil then nthreads = sess.engine:threads() end
    end
    track(1, "lua caller thread")
    for _, r in ipairs(self:records()) do
        local s0 = r.start_ns
        if r.name == "parse" then
            x(1, "parse", s0, r.ns_parse, { rows = r.parsed_rows }, "parse")
        else
            local total = r.ns_total or 0
            x(1, r.name, s0, total, { session = r.session, device = r.device, rows = r.rows, nnz = r.nnz,
                                       bytes_h2d = r.bytes_h2d, bytes_d2h = r.bytes_d2h,
                                       fallbacks = r.fallbacks, batches = r.batches }, "call")
            local cur = s0
            if (r.ns_transform or 0) > 0 then x(1, "transform", cur, r.ns_transform, nil, "stage"); cur = cur + r.ns_transform end
            local gbase = gpu_tracks(r.device)
            if gbase then
                local dev = r.device
                track(gbase, dev .. " h2d (copy stream)")
                track(gbase + 1, dev .. " kernel (compute stream)")
                track(gbase + 2, dev .. " d2h (copy stream)")
                if (r.ns_h2d or 0) > 0 then x(gbase, "h2d", cur, r.ns_h2d, { bytes = r.bytes_h2d }, "stage"); cur = cur + r.ns_h2d end
                if (r.ns_kernel or 0) > 0 then x(gbase + 1, "kernel", cur, r.ns_kernel, { rows = r.rows }, "stage"); cur = cur + r.ns_kernel end
                if (r.ns_d2h or 0) > 0 then x(gbase + 2, "d2h", cur, r.ns_d2h, { bytes = r.bytes_d2h }, "stage"); cur = cur + r.ns_d2h end
            elseif (r.ns_kernel or 0) > 0 then
                track(2, fmt("cpu scoring (engine pool%s)", nthreads > 0 and (", " .. nthreads .. " threads") or ""))
                x(2, "kernel (cpu)", cur, r.ns_kernel, { rows = r.rows, nnz = r.nnz }, "stage")
                cur = cur + r.ns_kernel
            end
            if (r.ns_sync or 0) > 0 then x(1, "sync", cur, r.ns_sync, nil, "stage"); cur = cur + r.ns_sync end
            if (r.ns_overhead or 0) > 0 then x(1, "overhead", s0 + total - r.ns_overhead, r.ns_overhead, nil, "stage") end
        end
    end
    return { traceEvents = ev, displayTimeUnit = "ns",
             otherData = { producer = "wisp " .. wisp.version() .. " (lua/wisp/profile.lua)",
                           calls = self.n, dropped = self.dropped } }
end

-- Write the trace as JSON to path; returns true or nil, err.
function Profile:write(path)
    local ok, cjson = pcall(require, "cjson")
    if not ok then return nil, "profile: lua-cjson is not installed" end
    local tr = self:trace()
    local text = cjson.encode(tr)
    local f, err = io.open(path, "wb")
    if not f then return nil, "profile: " .. tostring(err) end
    f:write(text, "\n")
    f:close()
    self.path = path
    return true
end

-- wisp.profile(fn[, opts]) or wisp.profile{fn = fn, path = ..., max_records = ...}
-- Runs fn with the profiler on; writes the trace to opts.path when given. Returns the
-- profile (records, :table(), :trace(), :write(path)) and fn's first result. An error
-- in fn stops the profile and is raised again.
function M.profile(a, b)
    local fn, opts
    if type(a) == "function" then fn, opts = a, b or {}
    elseif type(a) == "table" then opts = a; fn = a.fn
    else error("bad argument #1 to 'profile' (function or table expected, got " .. type(a) .. ")", 2) end
    if type(fn) ~= "function" then error("bad argument #1 to 'profile' (fn: function expected)", 2) end
    local prof = M.start(opts)
    local ok, res = pcall(fn)
    prof:stop()
    if not ok then error(res, 0) end
    if opts.path then
        local wok, werr = prof:write(opts.path)
        if not wok then return nil, werr end
    end
    return prof, res
end

setmetatable(M, { __call = function(_, ...) return M.profile(...) end })
wisp.profile = M
return M
