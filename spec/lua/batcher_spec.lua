-- batcher_spec.lua — the batcher: each caller's own probability, max rows, the delay bound, preferred sizes, a full queue's rejection, errors, the scheduler.
local wisp = require "wisp"
local H = require "helpers"
local batcher = require "wisp.batcher"

local NF = 3000

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

    it("answers every caller with its own row's probability", function()
        local rows = H.random_rows(NF, { rows = 150, out_of_range = false })
        local want = H.ref_scores(w, NF, bias, rows)
        local sched = batcher.scheduler()
        local b = assert(batcher.new { session = sess, runtime = sched.runtime, max_rows = 32, max_delay_us = 200 })
        local got = run_callers(b, sched, rows)
        H.assert_scores(got, want, #rows, 1e-5, true, "batcher")
        local st = b:stats()
        assert.equal(150, st.rows)
        assert.equal(4, st.by_full)             -- 4 full batches of 32, then the 22 left after the delay
        assert.equal(5, st.batches)
        assert.equal(0, st.waiting)
    end)

    it("never sends a batch larger than max_rows, and respects the delay bound", function()
        local sched = batcher.scheduler()
        local sizes = {}
        local probe = { score = function(_, batch, out)
            sizes[#sizes + 1] = batch:rows()
            return sess:score(batch, out)
        end }
        local delay = 2000
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 8, max_delay_us = delay })
        local waits = {}
        -- 3 callers arrive together, 1 more 500 µs later: one batch of 4 after the delay
        for i = 1, 4 do
            sched:spawn(function()
                if i == 4 then sched.runtime.sleep_us(500) end
                assert(b:score({ i }))
                local ts, tdispatch = b:last_timing()
                waits[#waits + 1] = tdispatch - ts
            end)
        end
        sched:run()
        assert.same({ 4 }, sizes)
        for _, wt in ipairs(waits) do
            -- the bound plus what a loaded shared machine may add to a wake-up
            assert.is_true(wt <= delay + 5000, "waited " .. wt .. " us for a max_delay of " .. delay)
        end
        -- the oldest row waited about the delay: it left because of it, not earlier
        table.sort(waits)
        assert.is_true(waits[#waits] >= delay * 0.9, "the oldest row left after " .. waits[#waits] .. " us")
        assert.equal(1, b:stats().by_delay)
        -- 20 at once with max_rows 8: 8, 8, then 4
        sizes = {}
        local rows = {}
        for i = 1, 20 do rows[i] = { ids = { i } } end
        run_callers(b, sched, rows)
        assert.same({ 8, 8, 4 }, sizes)
    end)

    it("sends the largest preferred size that the waiting rows fill, without waiting for the delay", function()
        local sched = batcher.scheduler()
        local sizes = {}
        local probe = { score = function(_, batch, out) sizes[#sizes + 1] = batch:rows(); return sess:score(batch, out) end }
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 64,
                                       max_delay_us = 1e6, preferred = { 4, 16 } })
        local rows = {}
        for i = 1, 21 do rows[i] = { ids = { i } } end
        local t0 = batcher.now_us()
        run_callers(b, sched, rows)
        assert.same({ 16, 4, 1 }, sizes)
        local st = b:stats()
        assert.equal(2, st.by_preferred)
        assert.equal(1, st.by_delay)
        -- the last single row waited for the delay (1 s)
        assert.is_true(batcher.now_us() - t0 >= 1e6 * 0.9)
    end)

    it("rejects a row at once when the queue is full, with a clear message", function()
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
    end)

    it("gives every caller of a failed batch the error", function()
        local sched = batcher.scheduler()
        local probe = { score = function() return nil, "score: device on fire" end }
        local b = assert(batcher.new { session = probe, runtime = sched.runtime, max_rows = 3, max_delay_us = 10 })
        local _, errs = run_callers(b, sched, { { ids = { 1 } }, { ids = { 2 } }, { ids = { 3 } } })
        for i = 1, 3 do assert.equal("batcher: score: device on fire", errs[i]) end
    end)

    it("validates its options and changes its policy for the next batch", function()
        local sched = batcher.scheduler()
        assert.has_error(function() batcher.new { session = sess, runtime = sched.runtime, max_rows = 0 } end)
        assert.has_error(function() batcher.new { session = sess, runtime = sched.runtime, preferred = { 0 } } end)
        assert.has_error(function() batcher.new { session = sess } end)
        local b = assert(batcher.new { session = sess, runtime = sched.runtime })
        b:set { max_rows = 2, preferred = { 2, 1 } }
        assert.same({ max_rows = 2, max_delay_us = 1000, preferred = { 1, 2 }, max_queue = 4096 }, b:policy())
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

    it("reports a coroutine that waits forever instead of hanging", function()
        local sched = batcher.scheduler()
        sched:spawn(function() sched.runtime.wait({}) end)
        assert.has_error(function() sched:run() end, "scheduler: 1 coroutine(s) wait for an event nobody will post")
    end)
end)
