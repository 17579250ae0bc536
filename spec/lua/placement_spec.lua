-- placement_spec.lua — placement: function policies per batch, calibrated policies (crossover, interpolation), saving and loading them (JSON and Lua), pipelines switching devices only on change, calibrate on this machine.
local wisp = require "wisp"
local H = require "helpers"
local placement = require "wisp.placement"

local NF = 5000

local function model_and_rows()
    local path, w, bias = H.random_model(wisp, NF)
    local m = assert(wisp.load(path))
    return m, w, bias
end

describe("wisp.placement", function()
    after_each(H.cleanup)

    it("is reachable from the wisp module", function()
        assert.equal(placement.calibrate, wisp.calibrate)
        assert.equal(placement.pipeline, wisp.pipeline)
        assert.equal(placement, wisp.placement)
    end)

    it("calls a function policy per batch with rows, nnz and queue depth, and scores right", function()
        local m, w, bias = model_and_rows()
        local seen = {}
        local pipe = assert(wisp.pipeline { model = m, placement = { score = function(info)
            seen[#seen + 1] = { rows = info.rows, nnz = info.nnz, q = info.queue_depth }
            return info.rows >= 50 and "auto" or "cpu"
        end } })
        for _, n in ipairs({ 10, 80, 10, 60 }) do
            local rows = H.random_rows(NF, { rows = n, out_of_range = false })
            local b = assert(wisp.batch())
            H.add_rows(b, rows)
            local want = H.ref_scores(w, NF, bias, rows)
            pipe.queue_depth = n * 2
            local got = assert(pipe:score_table(b))
            H.assert_scores(got, want, n, 1e-5, true, "pipeline")
            assert.equal(n, seen[#seen].rows)
            assert.equal(b:nnz(), seen[#seen].nnz)
            assert.equal(n * 2, seen[#seen].q)
            assert.equal(n >= 50 and "auto" or "cpu", pipe:device())
        end
        -- the session moved only when the choice changed: cpu -> auto -> cpu -> auto
        assert.equal(3, pipe.switches)
        pipe:close()
    end)

    it("does not move the session when the choice stays the same", function()
        local m = model_and_rows()
        local sess = assert(m:session("cpu"))
        local moved = 0
        local orig = sess.set_device
        sess.set_device = function(self, d) moved = moved + 1; return orig(self, d) end
        local pipe = assert(wisp.pipeline { session = sess, placement = "cpu" })
        local b = assert(wisp.batch()); b:add({ 1, 2, 3 })
        for _ = 1, 5 do assert(pipe:score(b)) end
        assert.equal(0, moved)
        -- a new placement takes effect on the next batch, without a restart
        pipe:set_placement(function() return "auto" end)
        assert(pipe:score(b))
        assert.equal(1, moved)
        assert.equal("auto", sess:device())
    end)

    it("refuses a function that returns something other than a device", function()
        local m = model_and_rows()
        local pipe = assert(wisp.pipeline { model = m, placement = function() return "tpu:0" end })
        local b = assert(wisp.batch()); b:add({ 1 })
        local ok, err = pipe:score(b)
        assert.is_nil(ok)
        assert.matches("chose 'tpu:0', not a device", err, 1, true)
        assert.has_error(function() wisp.pipeline { model = m, placement = { score = "fpga" } } end)
        -- the device names the engine takes, gpus:N (the first N GPUs) among them
        for _, d in ipairs { "cpu", "gpu", "gpu:3", "gpus", "gpus:2", "auto" } do assert.is_true(placement.is_device(d), d) end
        for _, d in ipairs { "gpus:", "gpus:x", "gpu:-1", "GPU", "tpu:0" } do assert.is_false(placement.is_device(d), d) end
        assert.has_error(function() wisp.pipeline { model = m, placement = { scorer = "cpu" } } end)
    end)

    it("finds the crossover between measured sizes and picks the faster device", function()
        local p = placement.policy { devices = { "cpu", "gpu:0" }, points = {
            { rows = 10, ms = { cpu = 0.01, ["gpu:0"] = 0.02 } },
            { rows = 1000, ms = { cpu = 0.1, ["gpu:0"] = 0.03 } },
            { rows = 100000, ms = { cpu = 10, ["gpu:0"] = 1 } } } }
        -- cpu: 0.01 + 0.09 (r - 10) / 990, gpu: 0.02 + 0.01 (r - 10) / 990: equal at r = 133.75
        assert.equal(1, #p.crossover)
        assert.equal(134, p.crossover[1].rows)
        assert.equal("cpu", p:choose(1))
        assert.equal("cpu", p:choose(133))
        assert.equal("gpu:0", p:choose(134))
        assert.equal("gpu:0", p:choose({ rows = 1e7 }))
        -- and one device faster everywhere: no crossover
        local q = placement.policy { devices = { "cpu", "gpu:0" }, points = {
            { rows = 10, ms = { cpu = 1, ["gpu:0"] = 2 } }, { rows = 100, ms = { cpu = 2, ["gpu:0"] = 3 } } } }
        assert.equal(0, #q.crossover)
        assert.equal("cpu", q:choose(1e6))
        -- two crossings: gpu wins in the middle only
        local r = placement.policy { devices = { "cpu", "gpu:0" }, points = {
            { rows = 10, ms = { cpu = 1, ["gpu:0"] = 2 } }, { rows = 100, ms = { cpu = 3, ["gpu:0"] = 2 } },
            { rows = 1000, ms = { cpu = 3, ["gpu:0"] = 4 } } } }
        assert.equal(2, #r.crossover)
        assert.equal("cpu", r:choose(10)); assert.equal("gpu:0", r:choose(100)); assert.equal("cpu", r:choose(1000))
    end)

    it("saves and loads a policy as JSON and as a Lua table, and a loaded policy chooses the same", function()
        local p = placement.policy { devices = { "cpu", "gpu:0" }, points = {
            { rows = 10, ms = { cpu = 0.01, ["gpu:0"] = 0.02 } },
            { rows = 1000, ms = { cpu = 0.1, ["gpu:0"] = 0.03 } } } }
        for _, ext in ipairs({ ".json", ".lua" }) do
            local path = H.tmpname(ext)
            assert(p:save(path))
            local q = assert(placement.load(path))
            for _, n in ipairs({ 1, 50, 133, 134, 500, 1e6 }) do assert.equal(p:choose(n), q:choose(n), ext .. " " .. n) end
            assert.equal(p.crossover[1].rows, q.crossover[1].rows)
        end
        -- a Lua policy file runs with no globals: it cannot call os.execute
        local evil = H.tmpname(".lua")
        H.write_file(evil, "os.execute('true') return {}")
        local q, err = placement.load(evil)
        assert.is_nil(q)
        assert.matches("os", err)
        local bad = H.tmpname(".json")
        H.write_file(bad, '{"devices": ["cpu"], "points": [{"rows": 10, "ms": {}}]}')
        q, err = placement.load(bad)
        assert.is_nil(q)
        assert.matches("no time for device 'cpu'", err, 1, true)
        q, err = placement.load("/nonexistent/policy.json")
        assert.is_nil(q)
        assert.matches("nonexistent", err)
    end)

    it("calibrates this machine: every usable device measured at every size, applied to a session", function()
        local m = model_and_rows()
        local got = {}
        local pol = assert(wisp.calibrate(m, { sizes = { 1, 100, 2000 }, quick = true, repeats = 1, min_ms = 1,
                                               progress = function(size, d, ms) got[#got + 1] = { size, d, ms } end }))
        local devs = placement.usable_devices(m.engine)
        assert.equal(3 * #devs, #got)
        for _, p in ipairs(pol.points) do
            for _, d in ipairs(devs) do assert.is_true(p.ms[d] > 0) end
        end
        assert.equal(39, pol.model.features_per_row)
        -- saved and loaded, then applied to a session
        local path = H.tmpname(".json")
        assert(pol:save(path))
        local loaded = assert(placement.load(path))
        local sess = assert(m:session("cpu"))
        local pipe = loaded:apply(sess)
        local b = assert(wisp.batch()); b:add({ 1, 2 })
        assert(pipe:score(b))
        assert.equal(loaded:choose(1), pipe:device())
        -- with only the CPU here, the CPU is chosen everywhere
        if #devs == 1 then assert.equal("cpu", pol:choose(1e6)) end
    end)
end)
