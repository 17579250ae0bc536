-- batcher.lua — collects rows from many callers into batches (max rows, max delay, preferred sizes, a bounded queue); each caller gets its own probability. Runs on coroutines in plain LuaJIT or on OpenResty light threads.
--
--   local batcher = require "wisp.batcher"
--   local sched = batcher.scheduler()                       -- plain LuaJIT: coroutines + a loop
--   local b = batcher.new{ pipeline = pipe,                 -- or session = s
--                          runtime = sched.runtime,
--                          max_rows = 64, max_delay_us = 500, preferred = {16, 64}, max_queue = 4096 }
--   for i = 1, 64 do sched:spawn(function() local p, err = b:score(ids[i], vals[i]) ... end) end
--   sched:run()                                             -- until every coroutine is done
--
-- Inside nginx (OpenResty), runtime = batcher.ngx_runtime() (ngx.sleep and
-- ngx.semaphore), one batcher per worker; nothing else changes.
--
-- When a batch goes out (the rules, checked in this order):
--   * max_rows rows are waiting: a full batch goes at once, from the caller that filled it;
--   * preferred sizes: once the callers that arrived together have queued their rows
--     (one scheduler tick), the largest preferred size <= the rows waiting goes at once;
--   * max_delay_us after the oldest waiting row arrived, whatever is waiting goes.
-- So no row waits longer than max_delay_us for its batch to leave (plus the time the
-- runtime needs to wake up: a few microseconds here, about a millisecond with ngx.sleep).
-- One of the waiting callers (the oldest without an answer) does the waiting and the
-- dispatch; there is no background thread.
-- A full queue (max_queue rows waiting) refuses a row at once with
--   nil, "batcher: queue full (N rows waiting, limit M)".
-- Scoring errors reach every caller of that batch as nil, err.
local ffi = require "ffi"
local wisp = require "wisp"
local C = require "wisp.cdef"

local fmt = string.format
local floor, max, huge = math.floor, math.max, math.huge
local co_running, co_yield, co_create, co_resume, co_status = coroutine.running, coroutine.yield,
    coroutine.create, coroutine.resume, coroutine.status
local type, error, tonumber, tostring, ipairs, setmetatable = type, error, tonumber, tostring, ipairs, setmetatable

local M = {}

if not pcall(ffi.typeof, "struct wisp_batcher_timespec") then
    ffi.cdef [[
    struct wisp_batcher_timespec { long tv_sec; long tv_nsec; };
    int wisp_batcher_nanosleep(const struct wisp_batcher_timespec *req, struct wisp_batcher_timespec *rem) __asm__("nanosleep");
    ]]
end
local ts = ffi.new("struct wisp_batcher_timespec")

local function now_us() return tonumber(C.wisp_clock_ns()) / 1e3 end
M.now_us = now_us

-- Block the whole process for us microseconds: the kernel's sleep for the bulk, then a
-- spin for the last 100 µs (timer slack would otherwise add ~50 µs to every short wait).
local function os_sleep_us(us)
    local t_end = now_us() + us
    if us > 200 then
        local s = (us - 100) / 1e6
        ts.tv_sec = floor(s)
        ts.tv_nsec = floor((s - floor(s)) * 1e9)
        C.wisp_batcher_nanosleep(ts, nil)
    end
    while now_us() < t_end do end
end
M.os_sleep_us = os_sleep_us

---------------------------------------------------------------------------
-- runtimes: now_us(), sleep_us(us), wait(ticket), wake(ticket)
---------------------------------------------------------------------------

-- A cooperative scheduler for plain LuaJIT: spawn coroutines, run them until all are done.
-- Its .runtime is what a batcher takes. sleep_us and wait must be called from a
-- coroutine the scheduler runs.
local Scheduler = {}; Scheduler.__index = Scheduler

function M.scheduler(opts)
    opts = opts or {}
    local S = setmetatable({ ready = {}, nready = 0, timers = {}, live = 0, errors = {},
                            now_us = opts.now_us or now_us, os_sleep_us = opts.os_sleep_us or os_sleep_us }, Scheduler)
    local function make_ready(co, ...)
        local n = S.nready + 1
        S.nready = n
        S.ready[n] = co
    end
    S.make_ready = make_ready
    S.runtime = {
        name = "coroutines",
        now_us = S.now_us,
        sleep_us = function(us)
            local co = co_running()
            local t = S.timers
            t[#t + 1] = { at = S.now_us() + (us > 0 and us or 0), co = co }
            co_yield()
        end,
        wait = function(tk)
            tk.co = co_running()
            co_yield()
            tk.co = nil
        end,
        wake = function(tk)
            local co = tk.co
            if co then tk.co = nil; make_ready(co) end
        end,
    }
    return S
end

-- Start fn(...) as a coroutine (it runs when run() is called, or at the next tick).
function Scheduler:spawn(fn, ...)
    local args, nargs = { ... }, select("#", ...)
    local co = co_create(function() return fn(unpack(args, 1, nargs)) end)
    self.live = self.live + 1
    self.make_ready(co)
    return co
end

-- Run until every spawned coroutine has finished. Errors inside coroutines are collected
-- (self.errors) and the first one is raised after the loop.
function Scheduler:run()
    while self.live > 0 do
        if self.nready > 0 then
            local list, n = self.ready, self.nready
            self.ready, self.nready = {}, 0
            for i = 1, n do
                local co = list[i]
                local ok, err = co_resume(co)
                if not ok then self.errors[#self.errors + 1] = debug.traceback(co, tostring(err)) end
                if co_status(co) == "dead" then self.live = self.live - 1 end
            end
        end
        local timers = self.timers
        if #timers > 0 then
            local now = self.now_us()
            local soonest, keep = huge, {}
            for _, t in ipairs(timers) do
                if t.at <= now then self.make_ready(t.co)
                else keep[#keep + 1] = t; if t.at < soonest then soonest = t.at end end
            end
            self.timers = keep
            if self.nready == 0 and soonest < huge then self.os_sleep_us(soonest - now) end
        elseif self.nready == 0 and self.live > 0 then
            self.errors[#self.errors + 1] = fmt("scheduler: %d coroutine(s) wait for an event nobody will post", self.live)
            break
        end
    end
    if #self.errors > 0 then error(self.errors[1], 0) end
end

-- OpenResty: ngx.sleep (millisecond resolution, 0 yields to the other light threads)
-- and one ngx.semaphore per waiting caller.
function M.ngx_runtime()
    local ngx = ngx
    if not ngx then error("ngx_runtime: not inside OpenResty (no ngx)", 2) end
    local semaphore = require "ngx.semaphore"
    return {
        name = "ngx",
        now_us = now_us,
        sleep_us = function(us) ngx.sleep(us > 0 and us / 1e6 or 0) end,
        wait = function(tk)
            local sema = semaphore.new(0)
            tk.sema = sema
            sema:wait(60)
            tk.sema = nil
        end,
        wake = function(tk)
            local s = tk.sema
            if s then tk.sema = nil; s:post(1) end
        end,
    }
end

---------------------------------------------------------------------------
-- the batcher
---------------------------------------------------------------------------

local Batcher = {}; Batcher.__index = Batcher
M.Batcher = Batcher

local function check_opts(o, depth)
    local function uint(name, v, lo)
        if v == nil then return end
        if type(v) ~= "number" or v ~= floor(v) or v < lo then
            error(fmt("bad option %s (integer >= %d expected, got %s)", name, lo, tostring(v)), depth + 2)
        end
    end
    uint("max_rows", o.max_rows, 1)
    uint("max_queue", o.max_queue, 1)
    if o.max_delay_us ~= nil and (type(o.max_delay_us) ~= "number" or o.max_delay_us < 0) then
        error("bad option max_delay_us (microseconds >= 0 expected, got " .. tostring(o.max_delay_us) .. ")", depth + 1)
    end
    if o.preferred ~= nil then
        if type(o.preferred) ~= "table" then error("bad option preferred (a list of batch sizes expected)", depth + 1) end
        for i, p in ipairs(o.preferred) do
            if type(p) ~= "number" or p < 1 or p ~= floor(p) then
                error(fmt("bad option preferred (entry %d: a batch size >= 1 expected, got %s)", i, tostring(p)), depth + 1)
            end
        end
    end
end

-- batcher.new{pipeline = p | session = s, runtime = rt, max_rows = 64, max_delay_us = 1000,
--              preferred = {...}, max_queue = 4096}
function M.new(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'new' (table expected, got " .. type(opts) .. ")", 2) end
    local target = opts.pipeline or opts.session
    if type(target) ~= "table" or type(target.score) ~= "function" then
        error("bad argument #1 to 'new' (pipeline or session expected)", 2)
    end
    check_opts(opts, 1)
    local rt = opts.runtime
    if rt == nil then error("bad argument #1 to 'new' (runtime expected: batcher.scheduler().runtime or batcher.ngx_runtime())", 2) end
    local eng = target.model and target.model.engine or nil
    local batch, err = wisp.batch(eng)
    if not batch then return nil, "batcher: " .. tostring(err) end
    local self = setmetatable({
        target = target, rt = rt, batch = batch,
        max_rows = opts.max_rows or 64, max_delay_us = opts.max_delay_us or 1000,
        preferred = {}, max_queue = opts.max_queue or 4096,
        -- the queue: rows head..tail-1
        q_ids = {}, q_vals = {}, q_bids = {}, q_tk = {}, head = 1, tail = 1,
        flusher = nil, out = nil, outcap = 0,
        counters = { batches = 0, rows = 0, rejected = 0, by_full = 0, by_preferred = 0, by_delay = 0,
                     errors = 0, ns_score = 0 },
    }, Batcher)
    self:set(opts)
    return self
end

-- Change the policy (max_rows, max_delay_us, preferred, max_queue); the next batch uses it.
function Batcher:set(o)
    check_opts(o, 1)
    if o.max_rows then self.max_rows = o.max_rows end
    if o.max_delay_us then self.max_delay_us = o.max_delay_us end
    if o.max_queue then self.max_queue = o.max_queue end
    if o.preferred then
        local p = {}
        for i, v in ipairs(o.preferred) do p[i] = v end
        table.sort(p)
        self.preferred = p
    end
    return true
end

-- The policy as a table.
function Batcher:policy()
    local p = {}
    for i, v in ipairs(self.preferred) do p[i] = v end
    return { max_rows = self.max_rows, max_delay_us = self.max_delay_us, preferred = p, max_queue = self.max_queue }
end

function Batcher:waiting() return self.tail - self.head end

-- Counters: batches, rows, rejected, why batches left (full / preferred / delay), mean batch size.
function Batcher:stats()
    local c = self.counters
    local t = {}
    for k, v in pairs(c) do t[k] = v end
    t.mean_batch = c.batches > 0 and c.rows / c.batches or 0
    t.waiting = self.tail - self.head
    return t
end

-- Score the first k waiting rows as one batch and answer their callers.
function Batcher:dispatch(k, why)
    local head = self.head
    local b = self.batch
    b:clear()
    local q_ids, q_vals, q_bids, q_tk = self.q_ids, self.q_vals, self.q_bids, self.q_tk
    local tks = {}
    local bad
    for i = 0, k - 1 do
        local j = head + i
        local ids, vals, bids = q_ids[j], q_vals[j], q_bids[j]
        local ok, err
        if bids then ok, err = b:add_mixed(ids, vals or {}, bids)
        else ok, err = b:add(ids, vals) end
        if not ok then bad = err end
        tks[i + 1] = q_tk[j]
        q_ids[j], q_vals[j], q_bids[j], q_tk[j] = nil, nil, nil, nil
    end
    self.head = head + k
    local c = self.counters
    c[why] = c[why] + 1
    local target = self.target
    if target.queue_depth ~= nil then target.queue_depth = self.tail - self.head end
    if k > self.outcap then
        self.outcap = max(k, self.outcap * 2, 64)
        self.out_keep = ffi.new("float[?]", self.outcap)
        self.out = ffi.cast("float *", self.out_keep)   -- a pointer: session:score's fast path (no ffi.sizeof)
    end
    local out, err = nil, bad
    local t0 = now_us()
    if not bad then out, err = target:score(b, self.out) end
    local t1 = now_us()
    c.ns_score = c.ns_score + (t1 - t0) * 1e3
    c.batches = c.batches + 1
    c.rows = c.rows + k
    local wake = self.rt.wake
    if out then
        for i = 1, k do
            local tk = tks[i]
            tk.p, tk.done, tk.t_dispatch, tk.t_done, tk.batch_rows = out[i - 1], true, t0, t1, k
            wake(tk)
        end
    else
        c.errors = c.errors + 1
        local msg = "batcher: " .. tostring(err)
        for i = 1, k do
            local tk = tks[i]
            tk.err, tk.done, tk.t_dispatch, tk.t_done, tk.batch_rows = msg, true, t0, t1, k
            wake(tk)
        end
    end
end

-- The flusher: waits for the oldest row's deadline (or a preferred size) and sends batches,
-- until its own row is answered or nothing is waiting.
function Batcher:flush_loop(tk)
    local rt = self.rt
    rt.sleep_us(0)                       -- one tick: the callers that arrived together queue their rows
    while not tk.done do
        local n = self.tail - self.head
        if n <= 0 then return end
        local max_rows = self.max_rows
        if n >= max_rows then
            self:dispatch(max_rows, "by_full")
        else
            local pref = self.preferred
            local pick = 0
            for i = #pref, 1, -1 do
                if pref[i] <= n and pref[i] <= max_rows then pick = pref[i]; break end
            end
            if pick > 0 then
                self:dispatch(pick, "by_preferred")
            else
                local deadline = self.q_tk[self.head].t_submit + self.max_delay_us
                local now = rt.now_us()
                if now >= deadline then
                    self:dispatch(n, "by_delay")
                else
                    rt.sleep_us(deadline - now)
                end
            end
        end
    end
end

-- batcher:score(ids[, vals][, bids]) -> probability, or nil, err.
-- ids: a Lua array of 0-based feature ids (valued when vals is given); bids: binary ids
-- of a mixed row. Suspends the calling coroutine / light thread until the row's batch
-- is scored. The tables must not change until the call returns.
function Batcher:score(ids, vals, bids)
    if type(ids) ~= "table" then error("bad argument #1 to 'score' (table of ids expected, got " .. type(ids) .. ")", 2) end
    local n = self.tail - self.head
    if n >= self.max_queue then
        self.counters.rejected = self.counters.rejected + 1
        return nil, fmt("batcher: queue full (%d rows waiting, limit %d)", n, self.max_queue)
    end
    local rt = self.rt
    local tk = { done = false, t_submit = rt.now_us() }
    local t = self.tail
    self.q_ids[t], self.q_vals[t], self.q_bids[t], self.q_tk[t] = ids, vals, bids, tk
    self.tail = t + 1
    while self.tail - self.head >= self.max_rows do self:dispatch(self.max_rows, "by_full") end
    while not tk.done do
        if self.flusher == nil then
            self.flusher = tk
            self:flush_loop(tk)
            self.flusher = nil
        else
            rt.wait(tk)
        end
    end
    -- rows still waiting and nobody flushing: the oldest waiting caller takes over
    if self.flusher == nil and self.tail > self.head then rt.wake(self.q_tk[self.head]) end
    self.last_ticket = tk
    if tk.err then return nil, tk.err end
    return tk.p
end

-- batcher:score_row{ids=, vals=, bids=}
function Batcher:score_row(row)
    if type(row) ~= "table" then error("bad argument #1 to 'score_row' (table expected, got " .. type(row) .. ")", 2) end
    return self:score(row.ids or row, row.vals, row.bids)
end

-- The timings of the calling coroutine's last answered row: submitted, its batch sent,
-- answered (µs on the batcher's clock) and the size of its batch. For benchmarks.
function Batcher:last_timing()
    local tk = self.last_ticket
    if not tk then return nil end
    return tk.t_submit, tk.t_dispatch, tk.t_done, tk.batch_rows
end

function Batcher:close()
    if self.batch then self.batch:close(); self.batch = nil end
end

wisp.batcher = M
return M
