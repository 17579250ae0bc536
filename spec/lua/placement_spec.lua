-- placement_spec.lua — placement: function and calibrated policies, pipelines, the live re-check, calibrate.
--
-- Function policies per batch; calibrated policies (the choice rule within the measured spread, breaks,
-- policy:check), saving and loading them (JSON and Lua, version 1 and 2); the sweep's refinement around a
-- crossover (a synthetic measure); pipelines switching devices only on change; the live re-check next to a
-- break (synthetic devices: live costs that shift the crossover move the break, noise within the spread moves
-- nothing); the auto device's points as a policy; calibrate on this machine (CPU: devices cpu and auto,
-- interleaved).
local wisp = require "wisp"
local H = require "helpers"
local placement = require "wisp.placement"

local NF = 5000
local fmt = string.format

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

    -- a point from {device = {median, lo, hi}}
    local function pt(rows, t)
        local ms, spread = {}, {}
        for d, v in pairs(t) do
            ms[d] = v[1]
            if v[2] then spread[d] = { lo = v[2], hi = v[3] } end
        end
        return { rows = rows, ms = ms, spread = next(spread) and spread or nil }
    end
    local G = "gpu:0"

    it("chooses within the measured spread: a device faster only within the noise makes no pair of breaks", function()
        local p = placement.policy { devices = { "cpu", G }, points = {
            pt(10, { cpu = { 1.0, 0.9, 1.1 }, [G] = { 2.0, 1.9, 2.1 } }),
            pt(100, { cpu = { 1.50, 1.40, 1.60 }, [G] = { 1.45, 1.35, 1.55 } }),     -- gpu faster by median, within the spread
            pt(178, { cpu = { 1.6, 1.5, 1.7 }, [G] = { 1.9, 1.85, 1.95 } }),
            pt(1000, { cpu = { 5.0, 4.9, 5.1 }, [G] = { 2.0, 1.9, 2.1 } }) } }
        -- one break, where the medians cross between 178 and 1000: 178 + 822 * 0.3 / 3.3 = 252.7
        assert.equal(1, #p.crossover)
        assert.same({ rows = 253, from = "cpu", to = G }, p.crossover[1])
        for r = 1, 1500 do assert.equal(r < 253 and "cpu" or G, p:choose(r), "rows " .. r) end
        local rows, ok = p:check()
        assert.is_true(ok)
        assert.equal(4, #rows)
        local r100 = rows[2]
        assert.equal(100, r100.rows)
        assert.equal("cpu", r100.chosen); assert.equal(G, r100.best)
        assert.near(0.05, r100.slower_ms, 1e-12)
        assert.near(0.10 + 0.10, r100.allowed_ms, 1e-12)      -- (1.50 - 1.40) + (1.55 - 1.45)
        assert.equal(1.40, r100.chosen_lo); assert.equal(1.55, r100.best_hi)
        assert.is_true(r100.ok)
        assert.same({}, placement.check_failures(rows))
        -- the same points with the spread narrowed at 100 (bands apart): the faster one must be chosen there
        local q = placement.policy { devices = { "cpu", G }, points = {
            pt(10, { cpu = { 1.0, 0.9, 1.1 }, [G] = { 2.0, 1.9, 2.1 } }),
            pt(100, { cpu = { 1.50, 1.47, 1.52 }, [G] = { 1.45, 1.43, 1.46 } }),
            pt(178, { cpu = { 1.6, 1.5, 1.7 }, [G] = { 1.9, 1.85, 1.95 } }),
            pt(1000, { cpu = { 5.0, 4.9, 5.1 }, [G] = { 2.0, 1.9, 2.1 } }) } }
        assert.equal(3, #q.crossover)
        assert.equal("cpu", q:choose(10)); assert.equal(G, q:choose(100))
        assert.equal("cpu", q:choose(178)); assert.equal(G, q:choose(1000))
        -- breaks where the medians cross: 10 + 90 * 1 / 1.05 = 95.7; 100 + 78 * 0.05 / 0.35 = 111.1
        assert.same({ 96, 111, 253 }, { q.crossover[1].rows, q.crossover[2].rows, q.crossover[3].rows })
        assert.is_true(select(2, q:check()))
        -- with no spread recorded only the faster median is acceptable
        local strict = placement.policy { devices = { "cpu", G }, points = {
            pt(10, { cpu = { 1.0 }, [G] = { 2.0 } }), pt(100, { cpu = { 1.50 }, [G] = { 1.45 } }),
            pt(178, { cpu = { 1.6 }, [G] = { 1.9 } }), pt(1000, { cpu = { 5.0 }, [G] = { 2.0 } }) } }
        assert.equal(3, #strict.crossover)
        assert.equal(G, strict:choose(100))
        -- a crossing just above a measured size still leaves that size its own device: the break is
        -- kept in a+1 .. b (100 + 0.1 / 0.5 = 100.2 would round to 100)
        local near = placement.policy { devices = { "cpu", G }, points = {
            pt(100, { cpu = { 1.0 }, [G] = { 1.1 } }), pt(101, { cpu = { 1.5 }, [G] = { 1.1 } }) } }
        assert.equal(101, near.crossover[1].rows)
        assert.equal("cpu", near:choose(100)); assert.equal(G, near:choose(101))
        assert.is_true(select(2, near:check()))
    end)

    it("the 100-row case: a naive interpolation between coarse sizes picks the slower device; measured, it does not", function()
        -- coarse sizes only: the medians' lines cross at 10 + 990 * 0.0101 / 0.1801 = 65.5 rows,
        -- so 100 rows goes to the GPU although the CPU is clearly faster there (0.0204 against 0.0247 ms)
        local c10 = pt(10, { cpu = { 0.0014, 0.0013, 0.0015 }, [G] = { 0.0115, 0.0112, 0.0118 } })
        local c100 = pt(100, { cpu = { 0.0204, 0.0200, 0.0210 }, [G] = { 0.0247, 0.0240, 0.0255 } })
        local c1000 = pt(1000, { cpu = { 0.2, 0.19, 0.21 }, [G] = { 0.03, 0.029, 0.031 } })
        local naive = placement.policy { devices = { "cpu", G }, points = { c10, c1000 } }
        assert.equal(66, naive.crossover[1].rows)
        assert.equal(G, naive:choose(100))
        -- held to a measurement that has the 100-row point, its check says where it is not ok
        local rows, ok = naive:check { c10, c100, c1000 }
        assert.is_false(ok)
        assert.is_true(rows[1].ok); assert.is_false(rows[2].ok); assert.is_true(rows[3].ok)
        assert.equal(G, rows[2].chosen); assert.equal("cpu", rows[2].best)
        assert.near(0.0043, rows[2].slower_ms, 1e-12)
        assert.near((0.0247 - 0.0240) + (0.0210 - 0.0204), rows[2].allowed_ms, 1e-12)
        local lines = placement.check_failures(rows)
        assert.equal(1, #lines)
        assert.matches("^100 rows: chose gpu:0 at 0.0247 ms", lines[1])
        -- with the point measured (what calibrate's refinement does), the CPU gets 100 rows
        local measured = placement.policy { devices = { "cpu", G }, points = { c10, c100, c1000 } }
        assert.equal("cpu", measured:choose(100))
        assert.is_true(select(2, measured:check()))
        -- between 100 and 1000: 100 + 900 * 0.0043 / 0.1743 = 122.2
        assert.equal(122, measured.crossover[1].rows)
        for r = 1, 2000 do assert.equal(r < 122 and "cpu" or G, measured:choose(r), "rows " .. r) end
        -- a check against points missing a device is refused clearly
        assert.has_error(function() measured:check { { rows = 10, ms = { cpu = 1 } } } end, "bad argument #1 to 'check' (points[1]: no time for device 'gpu:0')")
    end)

    it("checks three devices and breaks between any two of them", function()
        local G1 = "gpu:1"
        local p = placement.policy { devices = { "cpu", G, G1 }, points = {
            pt(10, { cpu = { 1, 0.9, 1.1 }, [G] = { 3, 2.9, 3.1 }, [G1] = { 4, 3.9, 4.1 } }),
            pt(100, { cpu = { 3, 2.9, 3.1 }, [G] = { 2, 1.9, 2.1 }, [G1] = { 2.5, 2.4, 2.6 } }),
            pt(1000, { cpu = { 9, 8.9, 9.1 }, [G] = { 5, 4.9, 5.1 }, [G1] = { 3, 2.9, 3.1 } }) } }
        assert.equal("cpu", p:choose(10)); assert.equal(G, p:choose(100)); assert.equal(G1, p:choose(1000))
        assert.equal(2, #p.crossover)
        assert.equal(G, p.crossover[1].to); assert.equal(G1, p.crossover[2].to)
        assert.is_true(select(2, p:check()))
        -- where gpu:0 and gpu:1 are within each other's spread at 100, gpu:1 is kept: one break fewer
        local q = placement.policy { devices = { "cpu", G, G1 }, points = {
            pt(10, { cpu = { 1, 0.9, 1.1 }, [G] = { 3, 2.9, 3.1 }, [G1] = { 4, 3.9, 4.1 } }),
            pt(100, { cpu = { 3, 2.9, 3.1 }, [G] = { 2, 1.8, 2.2 }, [G1] = { 2.1, 1.95, 2.3 } }),
            pt(1000, { cpu = { 9, 8.9, 9.1 }, [G] = { 5, 4.9, 5.1 }, [G1] = { 3, 2.9, 3.1 } }) } }
        assert.equal(1, #q.crossover)
        assert.equal(G1, q:choose(100))
        local rows, ok = q:check()
        assert.is_true(ok)
        assert.equal(G, rows[2].best); assert.equal(G1, rows[2].chosen)
    end)

    it("refuses bad spreads, duplicate sizes or devices and unknown versions", function()
        local function bad(pts, want, extra)
            local t = { devices = { "cpu", G }, points = pts }
            for k, v in pairs(extra or {}) do t[k] = v end
            local ok, err = pcall(placement.policy, t)
            assert.is_false(ok)
            assert.matches(want, err, 1, true)
        end
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 }, spread = { cpu = { lo = 1.1, hi = 1.2 } } } }, "spread of 'cpu'")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 }, spread = { cpu = { lo = 0.9 } } } }, "spread of 'cpu'")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 }, spread = { [G] = { lo = 1, hi = 1.9 } } } }, "spread of 'gpu:0'")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 }, spread = "wide" } }, "points[1]: spread")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 } }, { rows = 10, ms = { cpu = 1, [G] = 2 } } }, "10 rows measured twice")
        bad({ { rows = 10.5, ms = { cpu = 1, [G] = 2 } } }, "a whole number")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 }, passes = 0 } }, "passes")
        bad({ { rows = 10, ms = { cpu = 1, [G] = 2 } } }, "version 3", { version = 3 })
        local ok, err = pcall(placement.policy, { devices = { "cpu", "cpu" }, points = { { rows = 1, ms = { cpu = 1 } } } })
        assert.is_false(ok)
        assert.matches("'cpu' twice", err, 1, true)
    end)

    it("saves and loads the spread (JSON and Lua) and still loads a version-1 policy without it", function()
        local p = placement.policy { devices = { "cpu", G }, points = {
            pt(10, { cpu = { 1.0, 0.9, 1.1 }, [G] = { 2.0, 1.9, 2.1 } }),
            pt(100, { cpu = { 1.50, 1.40, 1.60 }, [G] = { 1.45, 1.35, 1.55 } }),
            pt(178, { cpu = { 1.6, 1.5, 1.7 }, [G] = { 1.9, 1.85, 1.95 } }),
            pt(1000, { cpu = { 5.0, 4.9, 5.1 }, [G] = { 2.0, 1.9, 2.1 } }) } }
        p.points[2].passes = 7
        local t = p:to_table()
        assert.equal(2, t.version)
        assert.same({ lo = 1.40, hi = 1.60, min = 1.40, max = 1.60 }, t.points[2].spread.cpu)
        for _, ext in ipairs({ ".json", ".lua" }) do
            local path = H.tmpname(ext)
            assert(p:save(path))
            local q = assert(placement.load(path))
            assert.equal(2, q.version)
            for i, pp in ipairs(p.points) do
                for _, d in ipairs({ "cpu", G }) do
                    assert.near(pp.spread[d].lo, q.points[i].spread[d].lo, 1e-12)
                    assert.near(pp.spread[d].hi, q.points[i].spread[d].hi, 1e-12)
                end
            end
            assert.equal(7, q.points[2].passes)
            for r = 1, 1500, 7 do assert.equal(p:choose(r), q:choose(r), ext .. " " .. r) end
            local a, b = p:check(), q:check()
            for i = 1, #a do
                assert.equal(a[i].chosen, b[i].chosen); assert.equal(a[i].ok, b[i].ok)
                assert.near(a[i].allowed_ms, b[i].allowed_ms, 1e-12)
            end
        end
        -- a version-1 file (what calibrate saved before: the H200's points of commit fb769f3)
        local old = H.tmpname(".json")
        H.write_file(old, [[{"points": [{"ms": {"cpu": 0.0013880914642609, "gpu:0": 0.011477013761468}, "rows": 10},
            {"ms": {"cpu": 0.016242926948052, "gpu:0": 0.027567746556474}, "rows": 100},
            {"ms": {"cpu": 0.064167166666667, "gpu:0": 0.046681162790698}, "rows": 1000},
            {"ms": {"cpu": 0.16438752459016, "gpu:0": 0.092042844036697}, "rows": 10000},
            {"ms": {"cpu": 1.402714875, "gpu:0": 0.46483181818182}, "rows": 100000},
            {"ms": {"cpu": 2.720758, "gpu:0": 0.869532}, "rows": 200000}],
            "model": {"dtype": "f32", "num_features": 6815757, "features_per_row": 39}, "devices": ["cpu", "gpu:0"],
            "options": {"min_ms": 10, "repeats": 5}, "crossover": [{"from": "cpu", "to": "gpu:0", "rows": 454}],
            "kind": "calibrated", "date": "2026-11-29T16:26:25Z", "version": 1,
            "machine": {"cpu_threads": 16, "gpu_status": "1 CUDA device"}}]])
        local q = assert(placement.load(old))
        assert.is_nil(q.points[1].spread)
        assert.equal(454, q.crossover[1].rows)                  -- as it was saved
        local rows, ok = q:check()
        assert.is_true(ok)
        assert.equal(0, rows[2].allowed_ms)                     -- no spread: only the faster median is acceptable
        -- and the same in a Lua file
        local oldlua = H.tmpname(".lua")
        H.write_file(oldlua, "return { version = 1, devices = { 'cpu', 'gpu:0' }, points = { { rows = 10, ms = { cpu = 1, ['gpu:0'] = 2 } }, { rows = 1000, ms = { cpu = 3, ['gpu:0'] = 2 } } } }")
        q = assert(placement.load(oldlua))
        assert.equal("cpu", q:choose(10)); assert.equal(G, q:choose(1000))
    end)

    it("sweeps: refines between the sizes where the fastest device changes until within 1.25x, with more passes on close calls", function()
        -- synthetic devices: cpu 0.001 + 1e-4 r, gpu 0.02 + 1e-5 r ms: equal at 211.1 rows; passes +-1 %
        local calls = {}
        local function measure(size, n)
            calls[#calls + 1] = { size, n }
            local res = { cpu = {}, [G] = {} }
            for i = 1, n do
                local j = 1 + 0.01 * ((i % 3) - 1)
                res.cpu[i] = (0.001 + 1e-4 * size) * j
                res[G][i] = (0.02 + 1e-5 * size) * j
            end
            return res
        end
        local points, refined = placement.sweep(measure, { "cpu", G }, { 10000, 1, 10, 100, 1000, 10 }, { repeats = 5 })
        -- 100 -> 1000: 316 (gpu), 178 (cpu), 237 (gpu), 205 (cpu); 205 .. 237 is within 1.25x
        assert.same({ 316, 178, 237, 205 }, refined)
        local rows = {}
        for i, p in ipairs(points) do rows[i] = p.rows end
        assert.same({ 1, 10, 100, 178, 205, 237, 316, 1000, 10000 }, rows)
        for _, p in ipairs(points) do
            assert.equal(5, p.passes)                           -- every point decided: no extra passes
            for _, d in ipairs({ "cpu", G }) do
                assert.is_true(p.spread[d].lo <= p.ms[d] and p.ms[d] <= p.spread[d].hi and p.spread[d].lo < p.spread[d].hi)
                assert.is_true(p.spread[d].min <= p.spread[d].lo and p.spread[d].hi <= p.spread[d].max)
            end
        end
        local pol = placement.policy { devices = { "cpu", G }, points = points }
        assert.equal(1, #pol.crossover)
        local at = pol.crossover[1].rows
        assert.is_true(at > 205 and at <= 237)
        assert.equal(211, at)                                   -- where the medians' lines cross
        assert.is_true(select(2, pol:check()))
        -- two devices within each other's spread everywhere (the fastest flips by noise): nothing to refine
        local function twins(size, n)
            local res = { cpu = {}, [G] = {} }
            for i = 1, n do
                local j = 1 + 0.05 * ((i % 3) - 1)
                res.cpu[i] = size * j
                res[G][i] = size * (size % 20 == 0 and 0.99 or 1.01) * j
            end
            return res
        end
        local pt4, r4 = placement.sweep(twins, { "cpu", G }, { 10, 100, 1000, 10000 }, { repeats = 3, max_repeats = 3 })
        assert.equal(4, #pt4); assert.same({}, r4)
        assert.equal(G, placement.policy { devices = { "cpu", G }, points = { pt4[2] } }:choose(1))   -- fastest at 100 by median
        -- refine = false: the sizes only
        local p2, r2 = placement.sweep(measure, { "cpu", G }, { 1, 100, 1000 }, { repeats = 3, refine = false })
        assert.equal(3, #p2); assert.same({}, r2)
        -- a close call (the bands overlap at 300 rows) gets more passes, up to max_repeats
        calls = {}
        local function close(size, n)
            calls[#calls + 1] = { size, n }
            local res = { cpu = {}, [G] = {} }
            for i = 1, n do
                local j = size == 300 and (1 + 0.1 * ((i % 3) - 1)) or 1 + 0.001 * i
                res.cpu[i] = (size == 300 and 1.0 or size / 100) * j
                res[G][i] = (size == 300 and 1.02 or 3) * j
            end
            return res
        end
        local p3 = placement.sweep(close, { "cpu", G }, { 100, 300 }, { repeats = 4, max_repeats = 10, refine = false })
        assert.equal(4, p3[1].passes)
        assert.equal(10, p3[2].passes)
        assert.same({ { 100, 4 }, { 300, 4 }, { 300, 4 }, { 300, 2 } }, calls)
        -- a measure that returns too few passes is an error that says so
        assert.has_error(function() placement.sweep(function() return { cpu = { 1 } } end, { "cpu", G }, { 1 }, { repeats = 1 }) end,
                         "calibrate: measure(1, 1) gave no pass times for 'gpu:0'")
        assert.has_error(function() placement.sweep(measure, { "cpu" }, { 0 }) end)
    end)

    -- synthetic devices for the live re-check: calibrated cpu 0.001 + 1e-4 r, gpu 0.02 + 1e-5 r ms (equal at
    -- 211.1 rows), each point's band +-1 %
    local function line_policy(sizes)
        local pts = {}
        for i, r in ipairs(sizes) do
            local c, g = 0.001 + 1e-4 * r, 0.02 + 1e-5 * r
            pts[i] = pt(r, { cpu = { c, c * 0.99, c * 1.01 }, [G] = { g, g * 0.99, g * 1.01 } })
        end
        return placement.policy { devices = { "cpu", G }, points = pts }
    end
    local SIZES = { 1, 10, 100, 178, 205, 237, 316, 1000, 10000 }

    -- n batches of rows drawn from lo .. hi through live (a placement.live state), each timed call costing
    -- cost(device, rows) ms times a noise factor from noise(); returns the devices chosen per batch
    local function drive(live, n, lo, hi, cost, noise)
        local r = placement.rng(4242)
        local used = {}
        for _ = 1, n do
            local rows = lo + r() % (hi - lo + 1)
            local dev, z = live:choose(rows)
            used[dev] = (used[dev] or 0) + 1
            if z then live:observe(z, dev, rows, cost(dev, rows) * noise(r) * 1e6) end
        end
        return used
    end
    local function calibrated(dev, rows) return dev == "cpu" and 0.001 + 1e-4 * rows or 0.02 + 1e-5 * rows end
    local function none() return 1 end

    it("re-checks live next to a break: live costs that shift the crossover move the break, which follows", function()
        local pol = line_policy(SIZES)
        assert.equal(211, pol.crossover[1].rows)
        local live = placement.live.new(pol)
        -- the same costs as calibrated: nothing moves
        drive(live, 3000, 150, 300, calibrated, none)
        local st = live:state()
        assert.equal(0, st.moves)
        assert.is_true(st.rechecks > 0)
        assert.equal(211, st.crossover[1].rows)
        assert.same({ lo = 205, hi = 237, from = "cpu", to = G }, { lo = st.zones[1].lo, hi = st.zones[1].hi,
                                                                       from = st.zones[1].from, to = st.zones[1].to })
        -- the GPU 40 % faster than calibrated from here on: 0.012 + 6e-6 r, equal to the CPU at 117 rows.
        -- The break walks down bracket by bracket (205..237, 178..205, 100..178) to where the live costs cross
        local function faster_gpu(dev, rows)
            return dev == "cpu" and calibrated(dev, rows) or 0.6 * calibrated(dev, rows)
        end
        local r = placement.rng(7)
        local function jitter() return 1 + 0.004 * ((r() % 201) / 100 - 1) end          -- +-0.4 %: within the spread
        drive(live, 20000, 90, 300, faster_gpu, jitter)
        st = live:state()
        assert.is_true(st.moves >= 3, "moves " .. st.moves)
        assert.equal(1, #st.crossover)
        local at = st.crossover[1].rows
        assert.is_true(at >= 114 and at <= 120, "live crossover at " .. at)
        assert.equal(G, live:device_at(150)); assert.equal(G, live:device_at(205))
        assert.equal("cpu", live:device_at(100))
        assert.same({ 100, 178 }, { st.zones[1].lo, st.zones[1].hi })
        assert.same({ 211 }, { st.history[1].before[1] })
        assert.near(0.6, st.history[1].ratio[G], 0.01)
        assert.near(1.0, st.history[1].ratio.cpu, 0.01)
        -- the policy itself keeps its calibrated break
        assert.equal(211, pol.crossover[1].rows); assert.equal("cpu", pol:choose(150))
        -- and back: the GPU as calibrated again, the break returns up to where the calibration had it
        drive(live, 30000, 90, 300, calibrated, jitter)
        st = live:state()
        at = st.crossover[1].rows
        assert.is_true(at >= 205 and at <= 237, "live crossover back at " .. at)
        assert.equal("cpu", live:device_at(178))
    end)

    it("re-checks live without flapping: noise within the spread moves no break", function()
        -- two devices within each other's spread around the break: a = 200 rows (cpu 1.00 [0.97..1.03],
        -- gpu 1.02 [0.99..1.05]), b = 250 rows (cpu 1.10, gpu 1.04, the same bands)
        local function band3(m) return { m, m * 0.97, m * 1.03 } end
        local pol = placement.policy { devices = { "cpu", G }, points = {
            pt(100, { cpu = band3(0.5), [G] = band3(1.0) }), pt(200, { cpu = band3(1.00), [G] = band3(1.02) }),
            pt(250, { cpu = band3(1.10), [G] = band3(1.04) }), pt(400, { cpu = band3(2.0), [G] = band3(1.2) }) } }
        assert.equal(1, #pol.crossover)
        local at = pol.crossover[1].rows
        assert.is_true(at > 200 and at <= 250)
        local function cost(dev, rows) return pol:predict(rows, dev) end
        -- each call off by up to +-3 % (the bands' width), each device independently
        local r = placement.rng(99)
        local function noise() return 1 + 0.03 * ((r() % 2001) / 1000 - 1) end
        local live = placement.live.new(pol, { every = 16 })
        local used = drive(live, 40000, 190, 260, cost, noise)
        local st = live:state()
        assert.is_true(st.rechecks > 500, "rechecks " .. st.rechecks)
        assert.equal(0, st.moves)
        assert.same(pol.crossover, st.crossover)
        -- the other device gets a few batches (to be measured), the chosen one the rest
        assert.is_true(st.explored < 40000 * 6 / 16, "explored " .. st.explored)
        assert.is_true(used.cpu > 0 and used[G] > 0)
        -- a policy without a break has nothing to re-check
        local flat = placement.policy { devices = { "cpu", G }, points = { pt(10, { cpu = { 1 }, [G] = { 2 } }) } }
        local l2 = placement.live.new(flat)
        assert.same({ "cpu", nil }, { l2:choose(10) })
        assert.equal(0, #l2:state().zones)
        -- options are checked
        assert.has_error(function() placement.live.new(pol, { every = 9, calls = 4 }) end,
                         "bad live option (every: at least 2 * calls + 2 expected)")
        assert.has_error(function() placement.live.new(pol, { often = 1 }) end)
        assert.has_error(function() placement.live.new(pol, { window = 2, min_passes = 3 }) end)
    end)

    it("re-checks live inside a pipeline: calls timed through pipe:score, the session moved with the break", function()
        local m = model_and_rows()
        local pol = line_policy(SIZES)
        -- sessions that score nothing and advance a clock by what their device costs (the GPU 40 % faster
        -- than calibrated): the pipeline's own, and one per device to try the other device of a break on
        local now = 0
        local moved = 0
        local function fake(dev)
            local f = { dev = dev, calls = 0 }
            function f:set_device(d) self.dev = d; moved = moved + 1; return true end
            function f:device() return self.dev end
            function f:last_device() return self.dev end
            function f:score(b)
                local rows = b:rows()
                now = now + (self.dev == "cpu" and 0.001 + 1e-4 * rows or 0.6 * (0.02 + 1e-5 * rows)) * 1e6
                self.calls = self.calls + 1
                return true
            end
            f.score_table = f.score
            function f:submit() return true end
            function f:close() self.closed = true end
            return f
        end
        local main = fake("cpu")
        local pipe = assert(wisp.pipeline { model = m, placement = pol, live = { clock = function() return now end } })
        pipe.session:close()
        pipe.session, pipe.current = main, "cpu"
        local tries = { cpu = fake("cpu"), [G] = fake(G) }
        pipe.try_sessions.cpu, pipe.try_sessions[G] = tries.cpu, tries[G]
        local batches = {}
        for _, n in ipairs { 100, 130, 150, 178, 190, 205, 220, 237 } do
            local b = assert(wisp.batch())
            for _ = 1, n do b:add({ 1 }) end
            batches[#batches + 1] = b
        end
        for i = 1, 6000 do assert(pipe:score(batches[i % #batches + 1])) end
        local st = pipe:live()
        assert.is_true(st.moves >= 3, "moves " .. st.moves)
        assert.is_true(st.crossover[1].rows >= 114 and st.crossover[1].rows <= 120, "at " .. st.crossover[1].rows)
        assert(pipe:score(batches[3]))                              -- 150 rows
        assert.equal(G, pipe:device()); assert.equal(G, main.dev)
        assert.is_true(st.timed > 0 and st.timed < 6000)
        -- the other device was tried on its own sessions; the pipeline's session moved only with the breaks
        -- (batches of 100 .. 237 rows straddle the break: at most two moves a round of 8 batches)
        assert.is_true(tries.cpu.calls > 0 and tries[G].calls > 0)
        assert.equal(main.calls + tries.cpu.calls + tries[G].calls, 6001)
        assert.is_true(moved <= 2 * 6001 / 8 + 2, "moved " .. moved)
        -- submit places by the live breaks and times nothing
        local timed = st.timed
        for _ = 1, 200 do assert(pipe:submit(batches[6])) end
        assert.equal(timed, pipe:live().timed)
        -- live = false: the calibrated breaks only; a placement that is no policy has no live state
        local still = assert(wisp.pipeline { model = m, placement = pol, live = false })
        assert.is_nil(still:live())
        still.session:close()
        still.session, still.current = main, main.dev
        for i = 1, 2000 do assert(still:score(batches[i % #batches + 1])) end
        assert(still:score(batches[3]))
        assert.equal("cpu", still:device())
        pipe:set_placement("cpu")
        assert.is_nil(pipe:live())
        pipe:close()
        assert.is_true(main.closed and tries.cpu.closed and tries[G].closed)
        assert.has_error(function() wisp.pipeline { model = m, placement = pol, live = { every = 2 } } end)
        for _, b in ipairs(batches) do b:close() end
    end)

    it("makes a policy of the auto device's own points, or says why there are none", function()
        local m = model_and_rows()
        local s = assert(m:session("auto"))
        local b = assert(wisp.batch()); b:add({ 1, 2 })
        assert(s:score(b))
        local pol, err = placement.auto_policy(s)
        if pol == nil then
            -- no GPU here (or still starting): nothing measured
            assert.is_string(err)
            assert.matches("auto_policy: ", err, 1, true)
        else
            assert.same({ "cpu", "gpus" }, pol.devices)
            assert.equal(15, #pol.points)
            assert.equal(39, pol.model.features_per_row)
            -- its last break to the GPUs, times 39, is the crossover auto routes by (from this thread: the pool's)
            local ffi = require "ffi"
            local pool = ffi.new("uint64_t[1]")
            require("wisp.cdef").wisp_session_auto_state(s._h, nil, pool)
            local last = pol.crossover[#pol.crossover]
            if last and last.to == "gpus" then assert.equal(tonumber(pool[0]), last.rows * 39) end
        end
        assert.has_error(function() placement.auto_policy(b) end,
                         "bad argument #1 to 'auto_policy' (an open session expected)")
        assert.has_error(function() placement.auto_policy(s, "both") end)
        s:close()
    end)

    it("calibrates interleaved on the CPU (devices cpu and auto: no GPU needed), keeps the spread, and its check holds", function()
        local m = model_and_rows()
        -- each session's calls in order: interleaving shows as runs of one device, 2 a pass
        local Session = wisp.Session
        local orig = Session.score
        local log = {}
        Session.score = function(self, ...)
            local d = self:device()
            if log[#log] ~= d then log[#log + 1] = d end
            return orig(self, ...)
        end
        local pol, err = wisp.calibrate(m, { devices = { "cpu", "auto" }, sizes = { 1, 300 }, repeats = 3, max_repeats = 3,
                                             min_ms = 0.2, refine = false })
        Session.score = orig
        assert(pol, err)
        assert.equal(2, #pol.points)
        for _, p in ipairs(pol.points) do
            assert.is_true(p.passes >= 3)
            for _, d in ipairs({ "cpu", "auto" }) do
                local s = p.spread[d]
                assert.is_true(s.min <= s.lo and s.lo <= p.ms[d] and p.ms[d] <= s.hi and s.hi <= s.max)
                assert.is_true(s.min > 0)
            end
        end
        -- a size: the warm-up calls (cpu, auto), then 3 passes of each in turn: 2 + 2 x 3 runs of one
        -- device (timed one device after the other it would be 2 + 2)
        assert.equal(2 * (2 + 2 * 3), #log)
        for i = 2, #log do assert.are_not.equal(log[i - 1], log[i]) end
        assert.is_true(pol.options.interleaved)
        local rows, ok = pol:check()
        assert.is_true(ok, table.concat(placement.check_failures(rows), "\n"))
        assert.equal(2, #rows)
        -- saved with its spread and loaded
        local path = H.tmpname(".json")
        assert(pol:save(path))
        local q = assert(placement.load(path))
        assert.is_table(q.points[1].spread.auto)
        assert.equal(pol:choose(1), q:choose(1)); assert.equal(pol:choose(300), q:choose(300))
        -- the same device twice is refused
        assert.has_error(function() wisp.calibrate(m, { devices = { "cpu", "cpu" } }) end, "bad argument #2 to 'calibrate' (devices[2]: 'cpu' twice)")
        assert.has_error(function() wisp.calibrate(m, { sizes = { 0 } }) end)
    end)

    it("on a GPU: calibrates cpu against gpu:0, refined to within 1.25x wherever the fastest changes beyond the spread", function()
        local m = model_and_rows()
        local devs = placement.usable_devices(m.engine)
        if not devs[2] then return pending("no usable GPU here (" .. tostring(select(2, placement.usable_devices(m.engine))) .. ")") end
        local pol = assert(wisp.calibrate(m, { devices = { "cpu", devs[2] }, sizes = { 1, 10, 100, 1000, 10000, 100000 },
                                               quick = true }))
        local rows, ok = pol:check()
        assert.is_true(ok, table.concat(placement.check_failures(rows), "\n"))
        -- wherever two neighbouring points' fastest devices differ, each outside the other's
        -- acceptable set, the bracket is within 1.25x (the refinement went that far)
        local function fastest(p)
            return p.ms.cpu <= p.ms[devs[2]] and "cpu" or devs[2]
        end
        local function accepts(p, d)
            local b = fastest(p)
            return p.spread[d].lo <= p.spread[b].hi
        end
        for i = 1, #pol.points - 1 do
            local a, b = pol.points[i], pol.points[i + 1]
            local fa, fb = fastest(a), fastest(b)
            if fa ~= fb and not (accepts(a, fb) and accepts(b, fa)) then
                assert.is_true(b.rows / a.rows <= 1.25, fmt("%d .. %d rows: %s then %s", a.rows, b.rows, fa, fb))
            end
        end
        for _, p in ipairs(pol.points) do assert.is_true(p.passes >= 3) end
    end)

    it("calibrates this machine: every usable device measured at every size, applied to a session", function()
        local m = model_and_rows()
        local got = {}
        local pol = assert(wisp.calibrate(m, { sizes = { 1, 100, 2000 }, quick = true, repeats = 1, min_ms = 1,
                                               progress = function(size, d, ms) got[#got + 1] = { size, d, ms } end }))
        local devs = placement.usable_devices(m.engine)
        -- every size, and those the refinement added between them (with a GPU: around the crossover)
        assert.equal(3 + #pol.options.refined, #pol.points)
        assert.equal(#pol.points * #devs, #got)
        local measured = {}
        for _, p in ipairs(pol.points) do
            measured[p.rows] = true
            for _, d in ipairs(devs) do assert.is_true(p.ms[d] > 0) end
        end
        assert.is_true(measured[1] and measured[100] and measured[2000])
        local rows, ok = pol:check()
        assert.is_true(ok, table.concat(placement.check_failures(rows), "\n"))
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
