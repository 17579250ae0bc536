-- batcher_spec.lua — the batcher: each caller's own probability, max rows, the delay bound, preferred sizes, a full queue's rejection, errors (target, malformed rows), takeover, no allocation per row, the scheduler.
local wisp = require "wisp"
local H = require "helpers"
local batcher = require "wisp.batcher"

local NF = 3000

-- The documented runtime interface only (no `sched`): the batcher's ticket path, the one
-- other runtimes (ngx) take, on top of the coroutine scheduler.
local function generic_runtime(sched)
    local rt = sched.runtime
    return { name = "generic", now_us = rt.now_us, sleep_us = rt.sleep_us, wait = rt.wait, wake = rt.wake }
end
-- A virtual clock for the scheduler: time moves only when every coroutine waits, by
-- exactly what the next timer needs, so the tests below time the batcher to the
-- microsecond on any machine, however loaded (a sanitizer build, a busy CI box).
local function virtual_clock()
    local t = 0
    return { now_us = function() return t end, os_sleep_us = function(us) if us > 0 then t = t + us end end }
end
local RUNTIMES = {
    { "scheduler", function(sched) return sched.runtime end },
    { "generic", generic_runtime },
}

describe("wisp.batcher", function()
    local m, w, bias, sess
    before_each(function()
        local path
        path, w, bias = H.random_model(wisp, NF)
        m = assert(wisp.load(path))
        sess = assert(m:session("cpu"))
    end)
    after_each(H.cleanup)

    local function run_callers(b, sched, rows)
        local got, errs = {}, {}
        for i, r in ipairs(rows) do
            sched:spawn(function()
                local p, err = b:score(r.ids, r.vals, r.bids)
                got[i], errs[i] = p, err
            end)
        end
        sched:run()
        return got, errs
    end

    for _, rt_case in ipairs(RUNTIMES) do
        local rname, make_rt = rt_case[1], rt_case[2]
        it("answers every caller with its own row's probability (" .. rname .. " runtime)", function()
            local rows = H.random_rows(NF, { rows = 150, out_of_range = false })
            local want = H.ref_scores(w, NF, bias, rows)
            local sched = batcher.scheduler()
            local b = assert(batcher.new { session = sess, runtime = make_rt(sched), max_rows = 32, max_delay_us = 200 })
            local got = run_callers(b, sched, rows)
            H.assert_scores(got, want, #rows, 1e-5, true, "batcher")
            local st = b:stats()
            assert.equal(150, st.rows)
            assert.equal(4, st.by_full)             -- 4 full batches of 32, then the 22 left after the delay
            assert.equal(5, st.batches)
            assert.equal(0, st.waiting)
        end)

        it("in a closed loop, fills every batch and answers each round right (" .. rname .. " runtime)", function()
            local rows = H.random_rows(NF, { rows = 64 * 5, out_of_range = false })
            local want = H.ref_scores(w, NF, bias, rows)
            local sched = batcher.scheduler(virtual_clock())
            local b = assert(batcher.new { session = sess, runtime = make_rt(sched), max_rows = 64, max_delay_us = 1e6 })
            local got = {}
            for c = 1, 64 do
                sched:spawn(function()
                    for k = 0, 4 do
                        local i = k * 64 + c
                        got[i] = assert(b:score(rows[i].ids, rows[i].vals, rows[i].bids))
                    end
                end)
            end
            sched:run()
            H.assert_scores(got, want, #rows, 1e-5, true, "closed loop")
            local st = b:stats()
            assert.equal(5, st.by_full)
            assert.equal(0, st.by_delay)
            assert.equal(64, st.mean_batch)
            -- full batches never wait for the (1 s) delay: no time passed on the virtual clock
            assert.equal(0, sched.now_us(), "a closed loop of full batches waited")
        end)
    end

    it("never sends a batch larger than max_rows, and respects the delay bound", function()
        local sched = batcher.scheduler(virtual_clock())
        local sizes = {}
        local probe = { score = function(_, batch, out)
            sizes[#sizes + 1] = batch:rows()
            return sess:score(batch, out)
        end }
        local delay = 2000
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 8, max_delay_us = delay,
                                       timing = true })
        local waits = {}
        -- 3 callers arrive together, 1 more 500 µs later: one batch of 4 after the delay
        for i = 1, 4 do
            sched:spawn(function()
                if i == 4 then sched.runtime.sleep_us(500) end
                assert(b:score({ i }))
                local ts, tdispatch, tdone, rows = b:last_timing()
                assert.is_true(ts <= tdispatch and tdispatch <= tdone)
                assert.equal(4, rows)
                waits[#waits + 1] = tdispatch - ts
            end)
        end
        sched:run()
        assert.same({ 4 }, sizes)
        -- the oldest rows waited the delay exactly (they left because of it, not earlier
        -- or later); the late one (timing = true: its own arrival) 500 µs less
        table.sort(waits)
        assert.same({ delay - 500, delay, delay, delay }, waits)
        assert.equal(1, b:stats().by_delay)
        -- 20 at once with max_rows 8: 8, 8, then 4
        sizes = {}
        local rows = {}
        for i = 1, 20 do rows[i] = { ids = { i } } end
        run_callers(b, sched, rows)
        assert.same({ 8, 8, 4 }, sizes)
    end)

    it("with max_delay 0, sends the callers that arrived together as one batch, at once", function()
        local sched = batcher.scheduler(virtual_clock())
        local sizes = {}
        local probe = { score = function(_, batch, out) sizes[#sizes + 1] = batch:rows(); return sess:score(batch, out) end }
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 64, max_delay_us = 0 })
        local waits = {}
        for i = 1, 11 do
            sched:spawn(function()
                if i == 11 then sched.runtime.sleep_us(3000) end   -- arrives alone, later
                assert(b:score({ i }))
                local ts, tdispatch = b:last_timing()
                waits[#waits + 1] = tdispatch - ts
            end)
        end
        sched:run()
        assert.same({ 10, 1 }, sizes)
        for _, wt in ipairs(waits) do assert.equal(0, wt, "waited with max_delay 0") end
        assert.equal(3000, sched.now_us())             -- the late one's sleep, and no other wait
        assert.equal(2, b:stats().by_delay)
    end)

    it("sends the largest preferred size that the waiting rows fill, without waiting for the delay", function()
        for _, rt_case in ipairs(RUNTIMES) do
            local make_rt = rt_case[2]
            local sched = batcher.scheduler(virtual_clock())
            local sizes = {}
            local probe = { score = function(_, batch, out) sizes[#sizes + 1] = batch:rows(); return sess:score(batch, out) end }
            local b = assert(batcher.new { session = probe, runtime = make_rt(sched), max_rows = 64,
                                           max_delay_us = 1e6, preferred = { 4, 16 } })
            local rows = {}
            for i = 1, 21 do rows[i] = { ids = { i } } end
            local want = H.ref_scores(w, NF, bias, rows)
            local got = run_callers(b, sched, rows)
            H.assert_scores(got, want, #rows, 1e-5, true, "preferred")
            assert.same({ 16, 4, 1 }, sizes)
            local st = b:stats()
            assert.equal(2, st.by_preferred)
            assert.equal(1, st.by_delay)
            -- the last single row waited for the delay (1 s), and nothing else waited
            assert.equal(1e6, sched.now_us())
        end
    end)

    it("sends the rows left waiting in batches of a lowered max_rows", function()
        local sched = batcher.scheduler(virtual_clock())   -- the 12 rows wait 1e5 µs; the 13th comes at 1000
        local sizes = {}
        local probe = { score = function(_, batch, out) sizes[#sizes + 1] = batch:rows(); return sess:score(batch, out) end }
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 64, max_delay_us = 1e5 })
        local rows = {}
        for i = 1, 13 do rows[i] = { ids = { i, i + 7 } } end
        local want = H.ref_scores(w, NF, bias, rows)
        local got = {}
        for i = 1, 13 do
            sched:spawn(function()
                if i == 13 then
                    sched.runtime.sleep_us(1000)       -- 12 rows wait; then max_rows drops to 5
                    b:set { max_rows = 5 }
                end
                got[i] = assert(b:score(rows[i].ids))
            end)
        end
        sched:run()
        H.assert_scores(got, want, 13, 1e-5, true, "lowered max_rows")
        for _, n in ipairs(sizes) do assert.is_true(n <= 5, "a batch of " .. n .. " rows with max_rows 5") end
        assert.same({ 5, 5, 3 }, sizes)
    end)

    it("rejects a row at once when the queue is full, with a clear message, and takes rows again later", function()
        local sched = batcher.scheduler()
        local b = assert(batcher.new { session = sess, runtime = sched.runtime, max_rows = 100, max_delay_us = 1000,
                                       max_queue = 5 })
        local rows = {}
        for i = 1, 8 do rows[i] = { ids = { i } } end
        local got, errs = run_callers(b, sched, rows)
        local ok, rejected = 0, 0
        for i = 1, 8 do
            if got[i] then ok = ok + 1 else
                rejected = rejected + 1
                assert.equal("batcher: queue full (5 rows waiting, limit 5)", errs[i])
            end
        end
        assert.equal(5, ok)
        assert.equal(3, rejected)
        assert.equal(3, b:stats().rejected)
        got = run_callers(b, sched, { { ids = { 1 } }, { ids = { 2 } } })
        assert.is_number(got[1])
        assert.is_number(got[2])
    end)

    it("gives every caller of a failed batch the error, and goes on", function()
        for _, how in ipairs({ "returns", "raises" }) do
            local sched = batcher.scheduler()
            local fail = true
            local probe = { score = function(_, batch, out)
                if fail then
                    fail = false
                    if how == "raises" then error("score: device on fire", 0) end
                    return nil, "score: device on fire"
                end
                return sess:score(batch, out)
            end }
            local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 3, max_delay_us = 10 })
            local got, errs = run_callers(b, sched, { { ids = { 1 } }, { ids = { 2 } }, { ids = { 3 } } })
            for i = 1, 3 do
                assert.is_nil(got[i])
                assert.equal("batcher: score: device on fire", errs[i], how)
            end
            got = run_callers(b, sched, { { ids = { 1 } }, { ids = { 2 } } })
            assert.is_number(got[1], how)
            assert.is_number(got[2], how)
            assert.equal(1, b:stats().errors)
        end
    end)

    it("refuses to send a batch while the target, yielding, still scores the last one", function()
        local sched = batcher.scheduler()
        local probe = { score = function(_, batch, out)
            sched.runtime.sleep_us(0)                    -- a target that yields: not allowed
            return sess:score(batch, out)
        end }
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 2, max_delay_us = 100 })
        local rows = {}
        for i = 1, 4 do rows[i] = { ids = { i } } end
        local ok, err = pcall(run_callers, b, sched, rows)
        assert.is_false(ok)
        assert.matches("a batch was sent while another was being scored", err)
    end)

    it("answers a malformed row with the error, and scores the rest of its batch", function()
        for _, rt_case in ipairs(RUNTIMES) do
            local make_rt = rt_case[2]
            local sched = batcher.scheduler()
            local b = assert(batcher.new { session = sess, runtime = make_rt(sched), max_rows = 4, max_delay_us = 100 })
            local rows = { { ids = { 1, 2 } }, { ids = { 3, -1 } }, { ids = { 4 }, vals = { 0.5 } },
                           { ids = { 5 }, vals = { 1, 2 } }, { ids = { 6 }, vals = { 2 }, bids = { 7, 8 } } }
            local got, errs = run_callers(b, sched, rows)
            for _, i in ipairs({ 1, 3, 5 }) do
                local want = H.ref_row(w, NF, bias, rows[i])
                assert.is_true(math.abs(got[i] - want) < 1e-5, "row " .. i)
            end
            assert.is_nil(got[2])
            assert.matches("^batcher: bad argument .*id #2: non%-negative integer expected, got %-1", errs[2])
            assert.is_nil(got[4])
            assert.matches("^batcher: bad argument .*2 values for 1 ids", errs[4])
            assert.equal(2, b:stats().refused)
            assert.equal(3, b:stats().rows)
        end
    end)

    it("replaces a flusher that never comes back, on a runtime whose threads can be killed", function()
        local sched = batcher.scheduler(virtual_clock())
        local base = sched.runtime
        local doomed, t0 = true, 0
        local rt = { name = "killable", now_us = base.now_us, sleep_us = base.sleep_us, wake = base.wake,
                     waiter_timeout_us = true,
                     wait = function(tk, t)
                         -- a bound, so that a batcher that never takes over fails instead of hanging
                         if base.now_us() - t0 > 2e6 then error("no takeover within 2 s", 0) end
                         if t == 0 and doomed then
                             doomed = false
                             coroutine.yield()             -- nobody will resume it: as if killed
                         end
                         return base.wait(tk, t)
                     end }
        local b = assert(batcher.new { session = sess, runtime = rt, max_rows = 64, max_delay_us = 100 })
        local rows = {}
        for i = 1, 5 do rows[i] = { ids = { i } } end
        local want = H.ref_scores(w, NF, bias, rows)
        local got = {}
        local answered = {}
        for i = 1, 5 do sched:spawn(function() got[i] = b:score(rows[i].ids); answered[i] = sched.now_us() end) end
        assert.has_error(function() sched:run() end, "scheduler: 1 coroutine(s) wait for an event nobody will post")
        assert.is_nil(got[1])
        for i = 2, 5 do assert.is_true(math.abs(got[i] - want[i]) < 1e-5, "row " .. i) end
        assert.equal(1, b:stats().takeovers)
        -- a waiter takes over once the batch is over 10 ms past its deadline (100 µs): its
        -- second timed wait of max_delay + 10 ms ends at 20200 µs (virtual), the first
        -- after 10100; every row is answered then
        for i = 2, 5 do assert.equal(2 * (100 + 10000), answered[i], "row " .. i .. " answered at") end
    end)

    it("allocates nothing per row", function()
        local sched = batcher.scheduler()
        local b = assert(batcher.new { session = sess, runtime = sched.runtime, max_rows = 64, max_delay_us = 0 })
        local rows = H.random_rows(NF, { rows = 64, out_of_range = false, values = "mixed" })
        local function loop(rounds)
            for c = 1, 64 do
                sched:spawn(function()
                    local r = rows[c]
                    for _ = 1, rounds do assert(b:score(r.ids, r.vals, r.bids)) end
                end)
            end
            sched:run()
        end
        loop(50)                                         -- warm: the ticket pool, the arrays, the JIT
        collectgarbage("collect")
        collectgarbage("stop")
        local kb0 = collectgarbage("count")
        loop(200)
        local bytes = (collectgarbage("count") - kb0) * 1024
        collectgarbage("restart")
        -- per batch: one small table (its timings); a table per row would be >= 32 bytes
        assert.is_true(bytes / (64 * 200) < 16, string.format("%.1f bytes per row", bytes / (64 * 200)))
    end)

    it("validates its options and changes its policy for the next batch", function()
        local sched = batcher.scheduler()
        assert.has_error(function() batcher.new { session = sess, runtime = sched.runtime, max_rows = 0 } end)
        assert.has_error(function() batcher.new { session = sess, runtime = sched.runtime, preferred = { 0 } } end)
        assert.has_error(function() batcher.new { session = sess, runtime = sched.runtime, max_delay_us = -1 } end)
        assert.has_error(function() batcher.new { session = sess } end)
        assert.has_error(function() batcher.new { session = sess, runtime = {} } end)
        local b = assert(batcher.new { session = sess, runtime = sched.runtime })
        b:set { max_rows = 2, preferred = { 2, 1 } }
        assert.same({ max_rows = 2, max_delay_us = 1000, preferred = { 1, 2 }, max_queue = 4096 }, b:policy())
        assert.has_error(function() b:score("x") end, "bad argument #1 to 'score' (table of ids expected, got string)")
        assert.has_error(function() b:score({ 1 }) end,
                         "batcher: score must run in a coroutine of the batcher's scheduler (sched:spawn)")
        assert.equal(0, b:waiting())
    end)

    it("works with a pipeline and tells it the queue depth", function()
        local depths = {}
        local pipe = assert(wisp.pipeline { session = sess, placement = function(info)
            depths[#depths + 1] = info.queue_depth
            return "cpu"
        end })
        local sched = batcher.scheduler()
        local b = assert(batcher.new { pipeline = pipe, runtime = sched.runtime, max_rows = 100, max_delay_us = 100,
                                       preferred = { 4 } })
        local rows = {}
        for i = 1, 10 do rows[i] = { ids = { i, i + 1 }, vals = { 0.5, 2 } } end
        local got = run_callers(b, sched, rows)
        local want = H.ref_scores(w, NF, bias, rows)
        H.assert_scores(got, want, 10, 1e-5, true, "pipeline batcher")
        assert.same({ 6, 2, 0 }, depths)
    end)

    it("scheduler: wakes sleepers in deadline order and reports errors and deadlocks", function()
        local sched = batcher.scheduler()
        local order = {}
        for _, us in ipairs({ 3000, 1000, 2000, 0 }) do
            sched:spawn(function() sched.runtime.sleep_us(us); order[#order + 1] = us end)
        end
        sched:run()
        assert.same({ 0, 1000, 2000, 3000 }, order)
        sched:spawn(function() error("boom") end)
        local ok, err = pcall(sched.run, sched)
        assert.is_false(ok)
        assert.matches("boom", err)
        sched = batcher.scheduler()
        sched:spawn(function() sched.runtime.wait({}) end)
        assert.has_error(function() sched:run() end, "scheduler: 1 coroutine(s) wait for an event nobody will post")
    end)
end)
