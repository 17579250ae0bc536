-- transform_gpu_spec.lua — the transform node on a session's device from Lua: session:transform / session:score_raw against the CPU transform + score, and the pipeline's transform placement (fused on the score node's GPU, else the CPU).
local wisp = require "wisp"
local fc = require "wisp.columns"
local H = require "helpers"

local spec = assert(fc.spec {
    fc.input("age", "float32", { default = 30 }),
    fc.input("tags", "string", { sparse = true }),
    fc.input("uid", "int64"),
    fc.numeric("age"),
    fc.bucketized(fc.numeric("age"), { 18, 65 }),
    fc.hash_bucket("city", 1000),
    fc.hash_bucket("tags", 100),
    fc.identity("uid", 10, { default_value = 0 }),
    fc.crossed({ "city", "tags" }, 500),
    fc.crossed({ "city", "uid", fc.bucketized(fc.numeric("age"), { 18, 65 }) }, 777),
})

local cities = { "Paris", "Oslo", "", "a much longer city name than sixty-four bytes, to take FarmHash's long path", "Rome" }

local function rows(n, seed)
    local t, x = {}, seed
    local function rnd(k) x = (x * 1103515245 + 12345) % 2147483648; return x % k end
    for i = 1, n do
        local tags = {}
        for k = 1, rnd(4) do tags[k] = cities[1 + rnd(#cities)] .. k end
        t[i] = { age = rnd(90), city = cities[1 + rnd(#cities)], tags = tags, uid = rnd(12) - 1 }
        if rnd(20) == 0 then t[i].age = "old" end                 -- a bad row
    end
    return t
end

local function model()
    local path = H.tmpname(".wisp")
    local w, n = {}, spec:num_features()
    for i = 1, n do w[i] = ((i * 7919) % 13 - 6) * 0.05 end
    assert(wisp.write_model(path, w, { bias = -0.25, columns = spec:json() }))
    return assert(wisp.load(path))
end

describe("the transform node on a session's device", function()
    local m = model()
    local list = rows(300, 7)

    local function raw()
        local t = assert(spec:transformer())
        assert(t:add_rows(list))
        return t
    end

    local function reference()
        local b = assert(raw():transform())
        return b, assert(m:session("cpu"):score_table(b))
    end

    for _, dev in ipairs { "cpu", "gpu", "auto" } do
        it("session:transform on " .. dev .. " gives wisp_transform's batch", function()
            local ref = reference()
            local s = assert(m:session(dev))
            local b = assert(s:transform(raw()))
            assert.are.same(ref:csr(), b:csr())
            assert.are.same(ref:bad_rows(), b:bad_rows())
            s:close()
        end)

        it("session:score_raw on " .. dev .. " scores as transform + score", function()
            local _, p = reference()
            local s = assert(m:session(dev))
            local out, n = assert(s:score_raw(raw()))
            assert.are.equal(#p, n)
            local bad = 0
            for i = 1, n do
                if p[i] ~= p[i] then
                    bad = bad + 1
                    assert.is_true(out[i - 1] ~= out[i - 1], "row " .. i .. " should be NaN")
                else
                    assert.is_true(math.abs(out[i - 1] - p[i]) <= 1e-6, "row " .. i)
                end
            end
            assert.is_true(bad > 0)
            local st = s:stats()
            assert.are.equal(n, st.rows)
            assert.are.equal(bad, st.bad_rows)
            s:close()
        end)
    end

    it("refuses what is not a transformer", function()
        local s = assert(m:session("cpu"))
        assert.has_error(function() s:score_raw({}) end)
        assert.has_error(function() s:transform(42) end)
        s:close()
    end)

    it("the pipeline fuses transform and score on the score node's GPU, else transforms on the CPU", function()
        local _, p = reference()
        local usable = wisp.placement.usable_devices(m.engine)
        local gpu = usable[2]                                    -- "gpu:0" when there is one
        local cases = { { transform = "cpu", score = "cpu", want = "cpu" } }
        if gpu then
            cases[#cases + 1] = { transform = gpu, score = gpu, want = gpu }
            cases[#cases + 1] = { transform = gpu, score = "cpu", want = "^cpu %(" }
            cases[#cases + 1] = { transform = "cpu", score = gpu, want = "cpu" }
        else
            cases[#cases + 1] = { transform = "auto", score = "auto", want = "cpu" }   -- no GPU: the fused call runs on the CPU
        end
        for _, c in ipairs(cases) do
            local pipe = assert(wisp.pipeline { model = m, placement = { transform = c.transform, score = c.score } })
            local out, n = assert(pipe:score_raw(raw()))
            for i = 1, n do
                if p[i] == p[i] then assert.is_true(math.abs(out[i - 1] - p[i]) <= 1e-6) end
            end
            assert.matches(c.want, pipe:last_placement().transform)
            local b = assert(pipe:transform(raw()))
            assert.are.equal(n, b:rows())
            pipe:close()
        end
        -- a function of the batch: raw rows say so in the info table
        local seen
        local pipe = assert(wisp.pipeline { model = m, placement = { score = "cpu",
            transform = function(info) seen = info.raw and info.rows; return "cpu" end } })
        assert(pipe:score_raw(raw()))
        assert.are.equal(#list, seen)
        pipe:close()
    end)
end)
