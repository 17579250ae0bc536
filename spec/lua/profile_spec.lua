-- profile_spec.lua — the profiler: the C per-call record (off by default, zero when off), the stage table, and the trace file (valid JSON, tracks, stages summing to each call's wall time within 5%).
local wisp = require "wisp"
local H = require "helpers"
local profile = require "wisp.profile"
local placement = require "wisp.placement"

local NF = 20000

describe("wisp.profile", function()
    local m, sess
    before_each(function()
        m = assert(wisp.load((H.random_model(wisp, NF))))
        sess = assert(m:session("cpu"))
    end)
    after_each(function()
        local p = profile.active()
        if p then p:stop() end
        H.cleanup()
    end)

    it("keeps no per-call record while profiling is off, and the right one when on", function()
        local b = placement.random_batches(m.engine, NF, 300, 39, 1, 5)[1]
        assert.is_false(sess:profiling())
        assert(sess:score(b))
        assert.is_nil(sess:last_stats())
        sess:set_profiling(true)
        local before = sess:stats()
        assert(sess:score(b))
        local after = sess:stats()
        local last = sess:last_stats()
        for k, v in pairs(after) do assert.equal(v - before[k], last[k], k) end
        assert.equal(300, last.rows)
        assert.equal(300 * 39, last.nnz)
        assert.is_true(last.start_ns > 0)
        assert.is_true(last.ns_total >= last.ns_kernel)
        sess:set_profiling(false)
        assert.is_nil(sess:last_stats())
    end)

    it("wraps nothing when no profile runs", function()
        local score = wisp.Session.score
        local prof = profile.start()
        assert.are_not.equal(score, wisp.Session.score)
        prof:stop()
        assert.equal(score, wisp.Session.score)
        assert.is_false(sess:profiling())
    end)

    it("writes a valid trace whose stages sum to each call's wall time within 5%", function()
        local batches = placement.random_batches(m.engine, NF, 2000, 39, 3, 9)
        local path = H.tmpname(".json")
        local prof = assert(wisp.profile(function()
            for i = 1, 12 do assert(sess:score(batches[i % 3 + 1])) end
            local b = assert(wisp.batch())
            b:parse_libsvm("1 3:1 5:2\n0 7:0.5 9\n")
            assert(sess:score(b))
            sess:submit(batches[1], require("ffi").new("float[2000]"))
            sess:wait()
        end, { path = path }))
        local recs = prof:records()
        assert.equal(16, #recs)               -- 13 scores, 1 parse, 1 submit, 1 wait
        local err, n = prof:stage_sum_error()
        assert.is_true(n >= 12)
        assert.is_true(err <= 0.05, "stages differ from the wall time by " .. err)
        -- the file is JSON with the trace event format
        local cjson = require "cjson"
        local doc = cjson.decode(H.read_file(path))
        assert.is_table(doc.traceEvents)
        local names, xs, tracks = {}, 0, {}
        for _, e in ipairs(doc.traceEvents) do
            if e.ph == "X" then
                xs = xs + 1
                assert.is_number(e.ts); assert.is_number(e.dur); assert.is_true(e.dur >= 0)
                assert.equal(1, e.pid)
                names[e.name] = (names[e.name] or 0) + 1
            elseif e.ph == "M" and e.name == "thread_name" then
                tracks[e.args.name] = true
            end
        end
        assert.equal(13, names.score)
        assert.equal(1, names.parse)
        assert.equal(14, names["kernel (cpu)"])   -- 13 scores + the submit (scored on the CPU at once)
        assert.is_true(tracks["lua caller thread"])
        local cpu_track = false
        for t in pairs(tracks) do if t:match("^cpu scoring") then cpu_track = true end end
        assert.is_true(cpu_track)
        -- per call, the children (kernel + overhead) add up to the call
        local sum, call = 0, 0
        for _, e in ipairs(doc.traceEvents) do
            if e.ph == "X" and (e.name == "kernel (cpu)" or e.name == "overhead") then sum = sum + e.dur end
            if e.ph == "X" and (e.name == "score" or e.name == "submit") then call = call + e.dur end
        end
        assert.is_true(math.abs(sum - call) <= 0.05 * call)
        -- the stage table
        local t = prof:table()
        assert.matches("kernel", t)
        assert.matches("14 batches, 26002 rows", t, 1, true)
        assert.is_false(sess:profiling())
    end)

    it("stops and re-raises when the profiled function fails", function()
        assert.has_error(function() wisp.profile(function() error("boom", 0) end) end, "boom")
        assert.is_nil(profile.active())
    end)

    it("prints a stage table from session statistics", function()
        local b = placement.random_batches(m.engine, NF, 100, 39, 1, 5)[1]
        for _ = 1, 4 do assert(sess:score(b)) end
        local t = profile.stage_table(sess:stats())
        assert.matches("stage%s+total ms%s+per batch us%s+%% wall", t)
        assert.matches("4 batches, 400 rows", t, 1, true)
        for _, s in ipairs({ "transform", "h2d", "kernel", "d2h", "sync", "overhead", "wall" }) do assert.matches(s, t) end
    end)
end)
