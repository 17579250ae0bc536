-- batcher.lua — collects rows from many callers into batches; each caller gets its own probability.
-- Batches go by max rows, max delay, preferred sizes; a bounded queue. Runs on coroutines in plain LuaJIT or on
-- OpenResty light threads.
--
--   local batcher = require "wisp.batcher"
--   local sched = batcher.scheduler()                       -- plain LuaJIT: coroutines + a loop
--                 -- ({now_us = f, os_sleep_us = g}: another clock; a virtual one makes time move
--                 --  only when every coroutine waits, for tests that time the batcher exactly)
--   local b = batcher.new{ pipeline = pipe,                 -- or session = s
--                          runtime = sched.runtime,
--                          max_rows = 64, max_delay_us = 500, preferred = {16, 64}, max_queue = 4096 }
--   for i = 1, 64 do sched:spawn(function() local p, err = b:score(ids[i], vals[i]) ... end) end
--   sched:run()                                             -- until every coroutine is done
--
-- Inside nginx (OpenResty), runtime = batcher.ngx_runtime() (ngx.sleep and
-- ngx.semaphore), one batcher per worker; nothing else changes.
--
-- A caller's row (its tables) waits in the queue; when its batch goes, the rows are
-- added to one batch in a single loop (batch:add_mixed / batch:add: exactly what a
-- caller scoring the same rows as one batch does) and scored. A row that add refuses
-- (a malformed id, a wrong number of values, a limit) is answered with
-- nil, "batcher: " .. add's message, and its batch goes without it.
--
-- When a batch goes out (the rules, checked in this order):
--   * max_rows rows are waiting: a full batch goes at once, from the caller that filled it;
--   * preferred sizes: once the callers that arrived together have queued their rows
--     (one scheduler tick), the largest preferred size <= the rows waiting goes at once;
--   * max_delay_us after the oldest waiting row arrived, whatever is waiting goes.
-- So no row waits longer than max_delay_us for its batch to leave (plus the time the
-- runtime needs to wake up: a few microseconds here, about a millisecond with ngx.sleep,
-- whose timers have millisecond resolution).
-- One of the waiting callers (the flusher: the oldest without an answer) does the
-- waiting and the dispatch; there is no background thread. When the flusher's own row
-- is answered, the oldest caller still waiting takes over.
-- A full queue (max_queue rows waiting) refuses a row at once with
--   nil, "batcher: queue full (N rows waiting, limit M)".
-- Scoring errors (nil, err from the target, or an error it raises) reach every caller of
-- that batch as nil, "batcher: " .. err; the batcher keeps working.
-- The target's score runs inside the call of the caller that sends the batch: it must not
-- yield (a second batch sent meanwhile raises an error saying so).
--
-- Cost, per row: one suspend/resume of the caller and a few array stores; no allocation
-- (one small table per batch), no clock read (unless timing = true). With the
-- coroutine scheduler a waiting caller is resumed straight with its answer, all of a
-- batch's callers made ready in one pass; the flusher and other runtimes use pooled
-- tickets. Measured (scripts/bench/bench_batcher.lua, 2 shared cores): ~100-150 ns a row
-- on top of building and scoring the batch, of which ~45 ns is LuaJIT's own
-- resume+yield pair; that is the floor of batching by coroutines here.
--
-- A runtime is a table {name, now_us(), sleep_us(us), wait(tk[, timeout_us]), wake(tk)}:
-- wait suspends the caller until wake(tk) (or, with timeout_us, until that many µs have
-- passed; 0: until the callers that are ready now have run); wake of a ticket nobody
-- waits on does nothing. Waits may end early: the batcher always re-checks. Optional:
-- waiter_timeout_us = true (threads can be killed, as ngx's: every waiter waits with a
-- timeout and takes the flusher's place when a batch is 10 ms past its deadline);
-- sched (the coroutine scheduler's own fast path).
--
-- Also: batcher:stats() (batches, rows, why they left, rejected, refused, errors,
-- takeovers, mean_batch, waiting), batcher:policy(), batcher:set{...} (the next batch
-- uses it), batcher:last_timing(), batcher:score_row{ids=, vals=, bids=}, batcher:close().
local ffi = require "ffi"
local wisp = require "wisp"
local C = require "wisp.cdef"

local fmt = string.format
local floor, max = math.floor, math.max
local co_yield, co_create, co_resume = coroutine.yield, coroutine.create, coroutine.resume
local type, error, pcall, tonumber, tostring, ipairs, pairs, setmetatable, select, unpack =
    type, error, pcall, tonumber, tostring, ipairs, pairs, setmetatable, select, unpack

local M = {}


local function now_us() return tonumber(C.wisp_clock_ns()) / 1e3 end
M.now_us = now_us

-- Block the whole process for us microseconds: the kernel's sleep for the bulk, then a
-- spin for the last 100 µs (timer slack would otherwise add ~50 µs to every short wait).
local function os_sleep_us(us)
    local t_end = now_us() + us
    if us > 200 then ffi.C.usleep(floor(us - 100)) end
    while now_us() < t_end do end
end
M.os_sleep_us = os_sleep_us

---------------------------------------------------------------------------
-- the coroutine scheduler
---------------------------------------------------------------------------

-- A cooperative scheduler for plain LuaJIT: spawn coroutines, run them until all are done.
-- Its .runtime is what a batcher takes. sleep_us and wait must be called from a
-- coroutine the scheduler runs.
-- Inside: the coroutines made ready during a pass run in the next pass (two arrays,
-- swapped, no allocation); timers are a binary min-heap in parallel arrays, checked
-- between passes; a timed wait that ends by wake leaves its timer behind, which is
-- ignored when it fires (a per-wait token).
local Scheduler = {}; Scheduler.__index = Scheduler
local DONE = setmetatable({}, { __tostring = function() return "scheduler: done" end })

function M.scheduler(opts)
    opts = opts or {}
    local S = setmetatable({
        -- ready coroutines for the next pass, with the two values each is resumed with
        cur = {}, curv = {}, curr = {}, nxt = {}, nxv = {}, nxr = {}, nnxt = 0,
        h_at = {}, h_co = {}, h_tk = {}, h_tok = {}, nh = 0, -- timers (min-heap on h_at)
        t_co = {}, t_tk = {}, t_tok = {}, nticks = 0,        -- waits of one tick
        tok = 0, live = 0, errors = {}, current = nil, passes = 0,
        now_us = opts.now_us or now_us, os_sleep_us = opts.os_sleep_us or os_sleep_us,
    }, Scheduler)
    local clock = S.now_us

    local function make_ready(co)
        local n = S.nnxt + 1
        S.nnxt = n
        S.nxt[n], S.nxv[n], S.nxr[n] = co, false, false
    end
    S.make_ready = make_ready

    -- push a timer: at (µs), the coroutine, and for a timed wait its ticket and token
    local function push_timer(at, co, tk, tok)
        local h_at, h_co, h_tk, h_tok = S.h_at, S.h_co, S.h_tk, S.h_tok
        local i = S.nh + 1
        S.nh = i
        while i > 1 do
            local p = floor(i / 2)
            if h_at[p] <= at then break end
            h_at[i], h_co[i], h_tk[i], h_tok[i] = h_at[p], h_co[p], h_tk[p], h_tok[p]
            i = p
        end
        h_at[i], h_co[i], h_tk[i], h_tok[i] = at, co, tk or false, tok
    end
    S.push_timer = push_timer

    S.runtime = {
        name = "coroutines",
        sched = S,              -- the batcher's fast path: waits and wakes inline
        now_us = clock,
        sleep_us = function(us)
            local co = S.current
            if us > 0 then
                push_timer(clock() + us, co, nil, 0)
            else
                local n = S.nnxt + 1
                S.nnxt = n
                S.nxt[n], S.nxv[n], S.nxr[n] = co, false, false
            end
            co_yield()
        end,
        wait = function(tk, timeout_us)
            local co = S.current
            tk.co = co
            if timeout_us then
                local tok = S.tok + 1
                S.tok = tok
                tk.tok = tok
                if timeout_us > 0 then
                    push_timer(clock() + timeout_us, co, tk, tok)
                else
                    -- one tick: ready again after this pass, no timer, no clock
                    local n = S.nticks + 1
                    S.nticks = n
                    S.t_co[n], S.t_tk[n], S.t_tok[n] = co, tk, tok
                end
            end
            co_yield()
            tk.co = false
            tk.tok = 0          -- a timer this wait left behind is ignored when it fires
        end,
        wake = function(tk)
            local co = tk.co
            if co then
                tk.co = false
                local n = S.nnxt + 1
                S.nnxt = n
                S.nxt[n], S.nxv[n], S.nxr[n] = co, false, false
            end
        end,
    }
    return S
end

-- Pop the earliest timer; returns its at, co, tk, tok.
function Scheduler:pop_timer()
    local h_at, h_co, h_tk, h_tok = self.h_at, self.h_co, self.h_tk, self.h_tok
    local n = self.nh
    local at, co, tk, tok = h_at[1], h_co[1], h_tk[1], h_tok[1]
    local lat, lco, ltk, ltok = h_at[n], h_co[n], h_tk[n], h_tok[n]
    h_at[n], h_co[n], h_tk[n], h_tok[n] = nil, nil, nil, nil
    n = n - 1
    self.nh = n
    if n > 0 then
        local i = 1
        while true do
            local c = 2 * i
            if c > n then break end
            if c < n and h_at[c + 1] < h_at[c] then c = c + 1 end
            if h_at[c] >= lat then break end
            h_at[i], h_co[i], h_tk[i], h_tok[i] = h_at[c], h_co[c], h_tk[c], h_tok[c]
            i = c
        end
        h_at[i], h_co[i], h_tk[i], h_tok[i] = lat, lco, ltk, ltok
    end
    return at, co, tk, tok
end

-- Start fn(...) as a coroutine (it runs when run() is called, or at the next pass).
function Scheduler:spawn(fn, ...)
    local nargs = select("#", ...)
    local co
    if nargs == 0 then
        co = co_create(function() fn(); return DONE end)
    else
        local args = { ... }
        co = co_create(function() fn(unpack(args, 1, nargs)); return DONE end)
    end
    self.live = self.live + 1
    self.make_ready(co)
    return co
end

-- Run until every spawned coroutine has finished. Errors inside coroutines are collected
-- (self.errors) and the first one is raised after the loop.
function Scheduler:run()
    while self.live > 0 do
        local n = self.nnxt
        if n > 0 then
            local list, vals, recs = self.nxt, self.nxv, self.nxr
            self.nxt, self.cur, self.nnxt = self.cur, list, 0
            self.nxv, self.curv = self.curv, vals
            self.nxr, self.curr = self.curr, recs
            self.passes = self.passes + 1
            for i = 1, n do
                local co = list[i]
                self.current = co
                local ok, r = co_resume(co, vals[i], recs[i])
                if r ~= nil then                 -- finished (DONE) or failed; a wait yields nothing
                    self.live = self.live - 1
                    if r ~= DONE then
                        self.errors[#self.errors + 1] = ok and fmt("scheduler: a coroutine yielded a value (%s)",
                            tostring(r))
                            or debug.traceback(co, tostring(r))
                    end
                end
            end
            self.current = nil
        end
        local nt = self.nticks
        if nt > 0 then
            local t_co, t_tk, t_tok = self.t_co, self.t_tk, self.t_tok
            self.nticks = 0
            for i = 1, nt do
                local co, tk = t_co[i], t_tk[i]
                if tk.co == co and tk.tok == t_tok[i] then
                    tk.co = false
                    self.make_ready(co)
                end
                t_co[i], t_tk[i] = false, false
            end
        end
        if self.nh > 0 then
            local now = self.now_us()
            while self.nh > 0 and self.h_at[1] <= now do
                local _, co, tk, tok = self:pop_timer()
                if not tk then
                    self.make_ready(co)
                elseif tk.co == co and tk.tok == tok then
                    tk.co = false
                    self.make_ready(co)
                end
            end
            if self.nnxt == 0 and self.nh > 0 then self.os_sleep_us(self.h_at[1] - now) end
        elseif self.nnxt == 0 and self.nticks == 0 and self.live > 0 then
            self.errors[#self.errors + 1] = fmt("scheduler: %d coroutine(s) wait for an event nobody will post",
                self.live)
            break
        end
    end
    for i = 1, #self.cur do self.cur[i], self.curv[i], self.curr[i] = nil, nil, nil end
    if #self.errors > 0 then
        local e = self.errors[1]
        self.errors = {}
        self.live = 0
        error(e, 0)
    end
end

-- OpenResty: ngx.sleep (millisecond resolution, 0 yields to the other light threads)
-- and one ngx.semaphore per ticket (tickets are pooled, and so are their semaphores).
function M.ngx_runtime()
    local ngx = ngx
    if not ngx then error("ngx_runtime: not inside OpenResty (no ngx)", 2) end
    local semaphore = require "ngx.semaphore"
    local sleep = ngx.sleep
    return {
        name = "ngx",
        now_us = now_us,
        -- waiters wait with a timeout, so a flusher that died (a killed light thread)
        -- is replaced by the next waiter that times out
        waiter_timeout_us = true,
        sleep_us = function(us) sleep(us > 0 and us / 1e6 or 0) end,
        wait = function(tk, timeout_us)
            if timeout_us == 0 then sleep(0); return end   -- one tick; not woken early
            local s = tk.sema
            if not s then s = semaphore.new(0); tk.sema = s end
            tk.waiting = true
            -- ngx timers count milliseconds: a shorter timeout would not wait at all
            local t = timeout_us and max(timeout_us / 1e6, 0.001) or 60
            s:wait(t)
            tk.waiting = false
        end,
        wake = function(tk)
            if tk.waiting then tk.waiting = false; tk.sema:post(1) end
        end,
    }
end

---------------------------------------------------------------------------
-- the batcher
---------------------------------------------------------------------------

local Batcher = {}; Batcher.__index = Batcher
M.Batcher = Batcher

local NOREC = { 0, 0, 0 }
local EMPTY = setmetatable({}, { __newindex = function() error("batcher: EMPTY is read-only", 2) end })
-- resumed with (TAKEOVER, ticket): the oldest waiting caller becomes the flusher
local TAKEOVER = setmetatable({}, { __tostring = function() return "batcher: takeover" end })

local function check_opts(o, depth)
    local function uint(name, v, lo)
        if v == nil then return end
        if type(v) ~= "number" or v ~= floor(v) or v < lo then
            error(fmt("bad option %s (integer >= %d expected, got %s)", name, lo, tostring(v)), depth + 2)
        end
    end
    uint("max_rows", o.max_rows, 1)
    uint("max_queue", o.max_queue, 1)
    if o.max_delay_us ~= nil
       and (type(o.max_delay_us) ~= "number" or o.max_delay_us < 0 or o.max_delay_us ~= o.max_delay_us) then
        error("bad option max_delay_us (microseconds >= 0 expected, got " .. tostring(o.max_delay_us) .. ")", depth + 1)
    end
    if o.preferred ~= nil then
        if type(o.preferred) ~= "table" then error("bad option preferred (a list of batch sizes expected)",
            depth + 1) end
        for i, p in ipairs(o.preferred) do
            if type(p) ~= "number" or p < 1 or p ~= floor(p) then
                error(fmt("bad option preferred (entry %d: a batch size >= 1 expected, got %s)", i, tostring(p)),
                    depth + 1)
            end
        end
    end
end

-- batcher.new{pipeline = p | session = s, runtime = rt, max_rows = 64, max_delay_us = 1000,
--              preferred = {...}, max_queue = 4096, timing = false}
-- timing = true: read the clock at each row's arrival (for last_timing).
function M.new(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'new' (table expected, got " .. type(opts) .. ")", 2) end
    local target = opts.pipeline or opts.session
    if type(target) ~= "table" or type(target.score) ~= "function" then
        error("bad argument #1 to 'new' (pipeline or session expected)", 2)
    end
    check_opts(opts, 1)
    local rt = opts.runtime
    if type(rt) ~= "table" or type(rt.wait) ~= "function" or type(rt.wake) ~= "function"
       or type(rt.now_us) ~= "function" then
        error("bad argument #1 to 'new' (runtime expected: batcher.scheduler().runtime or batcher.ngx_runtime())", 2)
    end
    local eng = target.model and target.model.engine or nil
    local batch, err = wisp.batch(eng)
    if not batch then return nil, "batcher: " .. tostring(err) end
    local self = setmetatable({
        target = target, rt = rt, sched = rt.sched or false, batch = batch,
        max_rows = opts.max_rows or 64, max_delay_us = opts.max_delay_us or 1000,
        preferred = {}, max_queue = opts.max_queue or 4096, timing = opts.timing and true or false,
        -- the waiting rows, oldest first. Slot i: the caller's tables, and how to answer
        -- it: q_co[i], a coroutine of the scheduler waiting in score (resumed with the
        -- answer), or q_tk[i], a ticket (the flusher, other runtimes); neither: the caller
        -- is the one dispatching.
        q_ids = {}, q_vals = {}, q_bids = {}, q_co = {}, q_tk = {}, n = 0, t_open = 0,
        pool = {}, npool = 0,                       -- free tickets
        flusher = false,                            -- the ticket of the caller that flushes
        busy = false,                               -- the target is scoring a batch
        out = nil, out_keep = nil, outcap = 0, last_rec = NOREC, last_submit = 0,
        counters = { batches = 0, rows = 0, rejected = 0, by_full = 0, by_preferred = 0, by_delay = 0,
                     errors = 0, refused = 0, ns_score = 0, takeovers = 0 },
    }, Batcher)
    self:set(opts)
    self:grow_out(self.max_rows)
    return self
end

function Batcher:grow_out(k)
    if k > self.outcap then
        self.outcap = max(k, self.outcap * 2, 64)
        self.out_keep = ffi.new("float[?]", self.outcap)
        self.out = ffi.cast("float *", self.out_keep)   -- a pointer: session:score's fast path (no ffi.sizeof)
    end
end

-- Change the policy (max_rows, max_delay_us, preferred, max_queue, timing); the next batch uses it.
function Batcher:set(o)
    check_opts(o, 1)
    if o.max_rows then self.max_rows = o.max_rows end
    if o.max_delay_us then self.max_delay_us = o.max_delay_us end
    if o.max_queue then self.max_queue = o.max_queue end
    if o.timing ~= nil then self.timing = o.timing and true or false end
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

function Batcher:waiting() return self.n end

-- Counters: batches, rows, rejected (queue full), refused (rows add refused), why batches
-- left (full / preferred / delay), errors (failed batches), mean batch size.
function Batcher:stats()
    local c = self.counters
    local t = {}
    for k, v in pairs(c) do t[k] = v end
    t.mean_batch = c.batches > 0 and c.rows / c.batches or 0
    t.waiting = self.n
    return t
end

local function pop_ticket(self)
    local np = self.npool
    if np > 0 then
        local tk = self.pool[np]
        self.npool = np - 1
        tk.done, tk.err = false, false
        return tk
    end
    -- every field present and of one type, so the compiled code sees one shape
    return { done = false, p = 0, err = false, co = false, tok = 0, rec = NOREC }
end

local function push_ticket(self, tk)
    local np = self.npool + 1
    self.npool = np
    self.pool[np] = tk
end

-- Give slot i's caller its answer v (a probability, or an error message).
local function deliver(self, i, v, rec)
    local co = self.q_co[i]
    if co then
        local S = self.sched
        local n = S.nnxt + 1
        S.nnxt = n
        S.nxt[n], S.nxv[n], S.nxr[n] = co, v, rec
        self.q_co[i] = false
        return
    end
    local tk = self.q_tk[i]
    if tk then
        if type(v) == "string" then tk.err = v else tk.p = v end
        tk.done, tk.rec = true, rec
        self.q_tk[i] = false
        self.rt.wake(tk)
    end
end

-- Add the rows of slots 1..k to batch b, in one loop. Returns the number added before
-- the first one add refused.
local function add_rows(b, q_ids, q_vals, q_bids, k)
    for i = 1, k do
        local bids = q_bids[i]
        local ok
        if bids then ok = b:add_mixed(q_ids[i], q_vals[i] or EMPTY, bids)
        else ok = b:add(q_ids[i], q_vals[i] or nil) end
        if not ok then return i - 1 end
    end
    return k
end

-- The slow path: some row was refused (or raised). Rebuild the batch row by row; each
-- refused row's caller gets the message. Returns the slots that made it, and the
-- message for slot `own` when it was refused.
local function add_rows_checked(self, b, k, own)
    local q_ids, q_vals, q_bids = self.q_ids, self.q_vals, self.q_bids
    b:clear()
    local slots, own_v = {}, nil
    for i = 1, k do
        local bids = q_bids[i]
        local okc, ok, err
        if bids then okc, ok, err = pcall(b.add_mixed, b, q_ids[i], q_vals[i] or EMPTY, bids)
        else okc, ok, err = pcall(b.add, b, q_ids[i], q_vals[i] or nil) end
        if okc and ok then
            slots[#slots + 1] = i
        else
            self.counters.refused = self.counters.refused + 1
            local msg = "batcher: " .. tostring(okc and err or ok)
            if i == own then own_v = msg else deliver(self, i, msg, NOREC) end
        end
    end
    return slots, own_v
end

-- Score the rows of slots 1..k as one batch and answer their callers; slot `own` is the
-- dispatching caller's (not waiting): its answer is returned, with the batch's timings.
function Batcher:dispatch(k, why, own)
    if self.busy then
        error("batcher: a batch was sent while another was being scored (the target's score yielded? it must not)", 0)
    end
    local n = self.n
    if k > n then k = n end
    local q_co, q_tk = self.q_co, self.q_tk
    local c = self.counters
    local batch = self.batch
    batch:clear()
    local okc, added = pcall(add_rows, batch, self.q_ids, self.q_vals, self.q_bids, k)
    local slots, own_v = nil, nil            -- slots == nil: batch row r is slot r + 1
    if not okc or added < k then slots, own_v = add_rows_checked(self, batch, k, own) end
    local rows = slots and #slots or k
    c[why] = c[why] + 1
    local target = self.target
    if target.queue_depth ~= nil then target.queue_depth = n - k end
    if rows > self.outcap then self:grow_out(rows) end
    local clock = self.rt.now_us                -- the runtime's clock (a test's may be virtual)
    local t0 = clock()
    local out, err = nil, nil
    if rows > 0 then
        self.busy = true
        okc, out, err = pcall(target.score, target, batch, self.out)
        self.busy = false
        if not okc then out, err = nil, out end
    end
    local t1 = clock()
    c.ns_score = c.ns_score + (t1 - t0) * 1e3
    c.batches = c.batches + 1
    c.rows = c.rows + rows
    local rec = { t0, t1, rows }                -- the batch's timings, for last_timing
    if rows == 0 then
        -- every row was refused, and answered
    elseif not out then
        c.errors = c.errors + 1
        local msg = "batcher: " .. tostring(err)
        for r = 1, rows do
            local i = slots and slots[r] or r
            if i == own then own_v = msg else deliver(self, i, msg, rec) end
        end
    elseif slots then
        for r = 1, rows do
            local i = slots[r]
            if i == own then own_v = out[r - 1] else deliver(self, i, out[r - 1], rec) end
        end
    else
        local S = self.sched
        if S then
            -- the scheduler: every waiter made ready in one pass, resumed with its answer
            local nxt, nxv, nxr, nn = S.nxt, S.nxv, S.nxr, S.nnxt
            for i = 1, k do
                local co = q_co[i]
                if co then
                    nn = nn + 1
                    nxt[nn], nxv[nn], nxr[nn] = co, out[i - 1], rec
                else
                    local tk = q_tk[i]
                    if tk then
                        tk.p, tk.done, tk.rec = out[i - 1], true, rec
                        local tco = tk.co
                        if tco then
                            tk.co = false
                            nn = nn + 1
                            nxt[nn], nxv[nn], nxr[nn] = tco, false, false
                        end
                    end
                end
            end
            S.nnxt = nn
        else
            local wake = self.rt.wake
            for i = 1, k do
                local tk = q_tk[i]
                if tk then
                    tk.p, tk.done, tk.rec = out[i - 1], true, rec
                    wake(tk)
                end
            end
        end
        if own then own_v = out[own - 1] end
    end
    -- slots k+1..n move down (rare: a preferred size, or max_rows lowered)
    local left = n - k
    if left > 0 then
        local q_ids, q_vals, q_bids = self.q_ids, self.q_vals, self.q_bids
        for i = 1, left do
            local j = i + k
            q_ids[i], q_vals[i], q_bids[i], q_co[i], q_tk[i] = q_ids[j], q_vals[j], q_bids[j], q_co[j], q_tk[j]
        end
    end
    self.n = left
    -- the flusher's row was answered: the oldest caller still waiting takes over
    local f = self.flusher
    if f and f.done then
        self.flusher = false
        if left > 0 then self:handover() end
    end
    return own_v, rec
end

-- Wake the caller of slot 1 so that it takes the flusher's place.
function Batcher:handover()
    local co = self.q_co[1]
    if co then
        -- a coroutine waiting in score: give it a ticket for its row, resume it with it
        local tk = pop_ticket(self)
        self.q_co[1], self.q_tk[1] = false, tk
        local S = self.sched
        local n = S.nnxt + 1
        S.nnxt = n
        S.nxt[n], S.nxv[n], S.nxr[n] = co, TAKEOVER, tk
    else
        local tk = self.q_tk[1]
        if tk then self.rt.wake(tk) end
    end
end

-- The flusher: waits one tick, then applies the preferred sizes and the delay, until
-- its own row is answered.
function Batcher:flush(tk)
    self.flusher = tk
    local rt = self.rt
    rt.wait(tk, 0)                       -- one tick: the callers that arrived together queue their rows
    while not tk.done do
        if self.flusher ~= tk then return end   -- replaced (a takeover)
        local n = self.n
        local max_rows = self.max_rows
        if n >= max_rows then
            self:dispatch(max_rows, "by_full")
        else
            local pref = self.preferred
            local pick = 0
            for i = #pref, 1, -1 do
                if pref[i] <= n then pick = pref[i]; break end
            end
            if pick > 0 then
                self:dispatch(pick, "by_preferred")
            else
                local deadline = self.t_open + self.max_delay_us
                local now = rt.now_us()
                if now >= deadline then
                    self:dispatch(n, "by_delay")
                else
                    rt.wait(tk, deadline - now)
                end
            end
        end
    end
    if self.flusher == tk then
        self.flusher = false
        if self.n > 0 then self:handover() end
    end
end

-- Waiting, the general way: become the flusher when nobody flushes; a runtime whose
-- threads can be killed (ngx) waits with a timeout, and a waiter takes the flusher's
-- place when the batch is well past its deadline.
function Batcher:wait_slow(tk)
    local rt = self.rt
    local f = self.flusher
    if not f then
        self:flush(tk)
    elseif rt.waiter_timeout_us then
        local over = self.t_open + self.max_delay_us + 10000
        rt.wait(tk, self.max_delay_us + 10000)
        if not tk.done and self.flusher == f and rt.now_us() > over then
            self.counters.takeovers = self.counters.takeovers + 1
            self:flush(tk)
        end
    else
        rt.wait(tk)
    end
end

local function answer(self, v, rec, ts)
    self.last_rec, self.last_submit = rec, ts
    if type(v) == "number" then return v end
    if type(v) == "string" then return nil, v end
    error("batcher: a waiting caller was resumed without its answer (resumed by hand?)", 3)
end

-- batcher:score(ids[, vals][, bids]) -> probability, or nil, err.
-- ids: a Lua array of 0-based feature ids (valued when vals is given); bids: binary ids
-- of a mixed row. Suspends the calling coroutine / light thread until the row's batch
-- is scored. The tables must not change until the call returns.
function Batcher:score(ids, vals, bids)
    if type(ids) ~= "table" then error("bad argument #1 to 'score' (table of ids expected, got " .. type(ids) .. ")",
        2) end
    local S = self.sched
    if S and not S.current then
        error("batcher: score must run in a coroutine of the batcher's scheduler (sched:spawn)", 2)
    end
    local max_rows = self.max_rows
    if self.n >= max_rows then                  -- rows left over from a larger max_rows
        repeat self:dispatch(max_rows, "by_full") until self.n < max_rows
    end
    local n = self.n
    if n >= self.max_queue then
        self.counters.rejected = self.counters.rejected + 1
        return nil, fmt("batcher: queue full (%d rows waiting, limit %d)", n, self.max_queue)
    end
    n = n + 1
    self.n = n
    self.q_ids[n], self.q_vals[n], self.q_bids[n] = ids, vals or false, bids or false
    local ts
    if n == 1 then
        ts = self.rt.now_us()
        self.t_open = ts
    elseif self.timing then
        ts = self.rt.now_us()
    else
        ts = self.t_open
    end
    if n >= max_rows then
        -- a full batch: it goes now, from this caller
        self.q_co[n], self.q_tk[n] = false, false
        local v, rec = self:dispatch(n, "by_full", n)
        return answer(self, v, rec, ts)
    end
    local tk
    if S and self.flusher then
        -- the scheduler, and somebody flushes: wait here, resumed with the answer
        self.q_co[n], self.q_tk[n] = S.current, false
        local v, r = co_yield()
        if type(v) == "number" then
            self.last_rec, self.last_submit = r, ts
            return v
        end
        if v ~= TAKEOVER then return answer(self, v, r, ts) end
        tk = r
    else
        tk = pop_ticket(self)
        self.q_co[n], self.q_tk[n] = false, tk
    end
    while not tk.done do self:wait_slow(tk) end
    local v = tk.err or tk.p
    local rec = tk.rec
    push_ticket(self, tk)
    return answer(self, v, rec, ts)
end

-- batcher:score_row{ids=, vals=, bids=}
function Batcher:score_row(row)
    if type(row) ~= "table" then error("bad argument #1 to 'score_row' (table expected, got " .. type(row) .. ")",
        2) end
    return self:score(row.ids or row, row.vals, row.bids)
end

-- The timings of the calling coroutine's last answered row (call it right after score
-- returns): arrived, its batch sent, answered (µs on the batcher's clock) and the size
-- of its batch. "Arrived" is the row's own arrival with timing = true; otherwise the
-- arrival of the first row of the batch it joined (no later than its own).
function Batcher:last_timing()
    local rec = self.last_rec
    if rec == NOREC then return nil end
    return self.last_submit, rec[1], rec[2], rec[3]
end

function Batcher:close()
    if self.batch then self.batch:close(); self.batch = nil end
    for i = 1, #self.q_ids do self.q_ids[i], self.q_vals[i], self.q_bids[i] = false, false, false end
end

wisp.batcher = M
return M
