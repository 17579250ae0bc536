-- queue_model_spec.lua — scripts/load/queue_model.lua against closed forms: M/M/1 and D/M/1 sojourn quantiles, D/D/c without waiting, Pollaczek-Khinchine (M/D/1), Erlang C (M/M/2), random dispatch, the percentiles, the CLI.
local Q = assert(loadfile("scripts/load/queue_model.lua"))("--module")
local log, exp, abs = math.log, math.exp, math.abs

-- fixed seeds: the simulation is deterministic, and these sizes keep every check inside
-- its tolerance with room (a wrong queue misses by far more)
local N = 200000

local function near(got, want, rel, what)
    local e = abs(got - want) / abs(want)
    assert(e <= rel, string.format("%s: got %.5g, want %.5g (off by %.1f%%, allowed %.1f%%)", what, got, want, 100 * e, 100 * rel))
end

describe("queue_model", function()
    it("M/M/1: the sojourn time is exponential with mean S/(1-rho)", function()
        for _, rho in ipairs { 0.5, 0.8 } do
            for _, S in ipairs { 1, 37.5 } do
                -- (at rho 0.8 successive sojourns are strongly correlated: a p99 from 1M requests
                -- varies by up to ~5% between seeds, 40 seeds tried)
                local r = Q.simulate { servers = 1, rho = rho, arrivals = "poisson", service = "exp", mean = S,
                                       n = rho < 0.7 and N or 1000000, seed = 11 }
                local m = S / (1 - rho)
                local tail = rho < 0.7 and 0.05 or 0.07
                near(r.mean, m, 0.04, "M/M/1 mean at rho " .. rho)
                near(r.p50, m * log(2), 0.04, "M/M/1 p50 at rho " .. rho)
                near(r.p90, m * log(10), 0.04, "M/M/1 p90 at rho " .. rho)
                near(r.p99, m * log(100), tail, "M/M/1 p99 at rho " .. rho)
                near(r.p99_over_p50, log(100) / log(2), tail, "M/M/1 p99/p50 at rho " .. rho)
                near(r.measured_mean_service, S, 0.01, "M/M/1 service mean")
            end
        end
    end)

    it("D/M/1: the sojourn time is exponential with rate mu(1 - sigma), sigma = exp(-(1 - sigma)/rho)", function()
        local rho = 0.7
        local sigma = 0.5
        for _ = 1, 200 do sigma = exp(-(1 - sigma) / rho) end
        local r = Q.simulate { servers = 1, rho = rho, arrivals = "const", service = "exp", n = N, seed = 3 }
        local m = 1 / (1 - sigma)
        near(r.mean, m, 0.04, "D/M/1 mean")
        near(r.p50, m * log(2), 0.05, "D/M/1 p50")
        near(r.p99, m * log(100), 0.05, "D/M/1 p99")
    end)

    it("D/D/c at rho < 1 never waits: p50 = p99 = max = S", function()
        for _, c in ipairs { 1, 2, 3 } do
            for _, rho in ipairs { 0.3, 0.8, 0.99 } do
                local r = Q.simulate { servers = c, rho = rho, arrivals = "const", service = "det", dispatch = "shared",
                                       mean = 2.5, n = 20000 }
                assert.are.equal(2.5, r.p50); assert.are.equal(2.5, r.p99)
                near(r.max, 2.5, 1e-9, "D/D/" .. c .. " max")
                assert.is_true(r.mean_wait < 1e-9, "D/D/c waited " .. r.mean_wait)
                assert.are.equal(1, r.p99_over_p50)
            end
        end
    end)

    it("M/D/1: mean wait rho S / (2 (1 - rho)) (Pollaczek-Khinchine)", function()
        for _, rho in ipairs { 0.5, 0.8 } do
            local r = Q.simulate { servers = 1, rho = rho, arrivals = "poisson", service = "det", mean = 3, n = 2 * N, seed = 5 }
            near(r.mean_wait, rho * 3 / (2 * (1 - rho)), 0.05, "M/D/1 mean wait at rho " .. rho)
            near(r.mean, 3 + rho * 3 / (2 * (1 - rho)), 0.04, "M/D/1 mean sojourn at rho " .. rho)
        end
    end)

    it("M/G/1 with an empirical sample list: Pollaczek-Khinchine with E[S^2]", function()
        local samples = { 0.5, 0.5, 0.5, 2.5 }          -- mean 1, E[S^2] = (3 * 0.25 + 6.25) / 4 = 1.75
        local rho = 0.6
        local r = Q.simulate { servers = 1, rho = rho, arrivals = "poisson", service = samples, n = 2 * N, seed = 9 }
        assert.are.equal(1, r.mean_service)
        near(r.measured_mean_service, 1, 0.01, "sampled service mean")
        -- Wq = lambda E[S^2] / (2 (1 - rho)), lambda = rho / E[S]
        near(r.mean_wait, rho * 1.75 / (2 * (1 - rho)), 0.05, "M/G/1 mean wait")
        -- one sample: the same as det
        local d = Q.simulate { servers = 1, rho = 0.8, arrivals = "const", service = { 4 }, n = 5000 }
        assert.are.equal(4, d.p99); assert.are.equal(4, d.p50)
        -- with a mean: scaled to it, the shape kept
        local s = Q.simulate { servers = 1, rho = 0.8, arrivals = "const", service = { 4 }, mean = 0.5, n = 5000 }
        assert.are.equal(0.5, s.p99)
        local t = Q.simulate { servers = 1, rho = rho, arrivals = "poisson", service = samples, mean = 10, n = 2 * N, seed = 9 }
        near(t.mean_wait, 10 * r.mean_wait, 1e-6, "scaled samples: the same queue in other units")
    end)

    it("M/M/2 with a shared queue: Erlang C, P(wait) = 2 rho^2 / (1 + rho), Wq = P(wait) S / (2 (1 - rho))", function()
        for _, rho in ipairs { 0.5, 0.8 } do
            local r = Q.simulate { servers = 2, rho = rho, arrivals = "poisson", service = "exp", dispatch = "shared", n = 2 * N, seed = 21 }
            local pw = 2 * rho * rho / (1 + rho)
            near(r.mean_wait, pw / (2 * (1 - rho)), 0.05, "M/M/2 mean wait at rho " .. rho)
        end
    end)

    it("random dispatch of a Poisson stream over c servers is c M/G/1 queues at rho; shared waits less", function()
        local rho = 0.8
        local rnd = Q.simulate { servers = 2, rho = rho, arrivals = "poisson", service = "det", dispatch = "random", n = 2 * N, seed = 13 }
        near(rnd.mean_wait, rho / (2 * (1 - rho)), 0.05, "M/D/1 per worker (random dispatch) mean wait")
        local shr = Q.simulate { servers = 2, rho = rho, arrivals = "poisson", service = "det", dispatch = "shared", n = 2 * N, seed = 13 }
        assert.is_true(shr.mean_wait < 0.6 * rnd.mean_wait, "shared queue waits less than random dispatch")
        assert.is_true(shr.p99 < rnd.p99)
        -- a constant stream split at random is no longer constant: it waits
        local dr = Q.simulate { servers = 2, rho = rho, arrivals = "const", service = "det", dispatch = "random", n = N, seed = 13 }
        assert.is_true(dr.mean_wait > 0.2 and dr.p99 > 2, "D/D/2 with random dispatch waits")
    end)

    it("is reproducible from its seed, and another seed gives another sample", function()
        local a = Q.simulate { servers = 2, rho = 0.8, arrivals = "poisson", service = "exp", dispatch = "random", n = 20000, seed = 42 }
        local b = Q.simulate { servers = 2, rho = 0.8, arrivals = "poisson", service = "exp", dispatch = "random", n = 20000, seed = 42 }
        local c = Q.simulate { servers = 2, rho = 0.8, arrivals = "poisson", service = "exp", dispatch = "random", n = 20000, seed = 43 }
        assert.are.equal(a.p99, b.p99); assert.are.equal(a.mean, b.mean)
        assert.are_not.equal(a.p99, c.p99)
    end)

    it("--delay adds a fixed time to every sojourn and changes no wait", function()
        local a = Q.simulate { servers = 2, rho = 0.8, arrivals = "poisson", service = "det", n = 20000, seed = 4 }
        local b = Q.simulate { servers = 2, rho = 0.8, arrivals = "poisson", service = "det", n = 20000, seed = 4, delay = 1.5 }
        near(b.p50, a.p50 + 1.5, 1e-9, "p50 + delay"); near(b.p99, a.p99 + 1.5, 1e-9, "p99 + delay")
        assert.are.equal(a.mean_wait, b.mean_wait)
    end)

    it("percentiles are nearest-rank, equal to a full sort's, duplicates included", function()
        local ffi = require "ffi"
        local rng = Q.rng(7)
        for _, n in ipairs { 1, 2, 3, 10, 101, 1000, 4097 } do
            local a, ref = ffi.new("double[?]", n), {}
            for i = 0, n - 1 do
                local v = math.floor(rng() * (n % 2 == 0 and 5 or 1e6))    -- many duplicates, or few
                a[i] = v; ref[i + 1] = v
            end
            table.sort(ref)
            local ps = { 0.1, 1, 50, 90, 99, 99.9, 100 }
            local got = Q.percentiles(a, n, ps)
            for j, p in ipairs(ps) do
                local k = math.max(1, math.ceil(p / 100 * n))
                assert.are.equal(ref[k], got[j], string.format("n %d, p%g", n, p))
            end
        end
    end)

    it("rejects bad arguments with a message naming them", function()
        local base = { servers = 1, rho = 0.5, n = 100 }
        local function with(k, v) local o = {}; for a, b in pairs(base) do o[a] = b end; o[k] = v; return o end
        for _, case in ipairs { { "rho", 1 }, { "rho", 0 }, { "servers", 0 }, { "servers", 1.5 }, { "arrivals", "bursty" },
                                { "dispatch", "rr" }, { "service", "gamma" }, { "service", {} }, { "delay", -1 }, { "mean", 0 } } do
            local ok, err = pcall(Q.simulate, with(case[1], case[2]))
            assert.is_false(ok, case[1] .. " = " .. tostring(case[2]) .. " was accepted")
            assert.matches("bad '" .. case[1] .. "' argument", err)
        end
        local path = os.tmpname()
        local f = assert(io.open(path, "w")); f:write("1.5 2\n# comment\n3,4;x\n"); f:close()
        local v, err = Q.read_samples(path)
        assert.is_nil(v); assert.matches("'x' is not a number", err)
        f = assert(io.open(path, "w")); f:write("1.5 2 # a comment 9\n3,4; 5\n"); f:close()
        assert.are.same({ 1.5, 2, 3, 4, 5 }, (Q.read_samples(path)))
        os.remove(path)
    end)

    it("runs as a command: --json, a service file, --table", function()
        local lj = "luajit"
        local path = os.tmpname()
        local f = assert(io.open(path, "w")); f:write("2\n2\n2\n"); f:close()
        local p = io.popen(lj .. " scripts/load/queue_model.lua --servers 2 --rho 0.8 --arrivals const --service " .. path
                           .. " --dispatch shared --n 5000 --json 2>&1")
        local out = p:read("*a"); p:close()
        os.remove(path)
        assert.matches('"p99_over_p50": 1[,}]', out)
        assert.matches('"p99": 2[,}]', out)
        assert.matches('"service": "file:', out)
        p = io.popen(lj .. " scripts/load/queue_model.lua --table --n 3000 2>&1")
        out = p:read("*a"); p:close()
        assert.matches("M/M/1", out); assert.matches("D/D/2 random", out); assert.matches("rho=0.8", out)
        p = io.popen(lj .. " scripts/load/queue_model.lua --rho 1.2 2>&1; echo rc=$?")
        out = p:read("*a"); p:close()
        assert.matches("%-%-rho", out); assert.matches("rc=1", out)
    end)
end)
