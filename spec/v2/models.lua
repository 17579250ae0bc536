-- models.lua — the models of the Open Inference Protocol specs: `wisp run spec/v2/models.lua DIR`.
--
-- DIR/plain.wisp   no columns: 5000 features (an id model: inputs indptr, indices, values)
-- DIR/ctr.wisp     feature columns over five inputs: age (float32, dense, default 30),
--                  city (string, dense), color (string, dense, vocabulary + OOV),
--                  uid (int64, dense, hashed), tags (string, sparse, hashed), and a cross
-- DIR/ctr_v2.wisp  the same columns, other weights
-- DIR/tiny.wisp    no columns: 10 features (ids at the table's edge)
local wisp = require "wisp"
local fc = require "wisp.columns"
local synth = require "wisp.synth"
local dir = assert(arg[1], "usage: models.lua DIR")

local age = fc.numeric("age", { default = 30, normalizer = { type = "standard", mean = 38, std = 13 } })
local spec = assert(fc.spec {
    fc.input("tags", "string", { sparse = true }),
    age,
    fc.bucketized(age, { 18, 25, 35, 50, 65 }),
    fc.hash_bucket("city", 1000),
    fc.vocabulary_list("color", { "red", "green", "blue" }, { num_oov_buckets = 2 }),
    fc.hash_bucket("uid", 10007, { dtype = "int64" }),
    fc.hash_bucket("tags", 500),
    fc.crossed({ "city", fc.bucketized(age, { 30, 60 }) }, 2000),
})
local nf = spec:num_features()
local function weights(seed, n)
    local r = synth.rng(seed)
    local w = {}
    for i = 1, n do w[i] = r:normal() * 0.5 end
    return w
end
assert(wisp.write_model(dir .. "/ctr.wisp", weights(1, nf),
                        { bias = -0.3, columns = spec:json(), meta = { name = "ctr", v = "1" } }))
assert(wisp.write_model(dir .. "/ctr_v2.wisp", weights(2, nf),
                        { bias = 0.4, columns = spec:json(), meta = { name = "ctr", v = "2" } }))
assert(wisp.write_model(dir .. "/plain.wisp", weights(5, 5000), { bias = 0.1, meta = { name = "plain" } }))
assert(wisp.write_model(dir .. "/plain_v2.wisp", weights(6, 5000), { bias = -0.2, meta = { name = "plain", v = "2" } }))
assert(wisp.write_model(dir .. "/tiny.wisp", weights(7, 10), { bias = 0.25, meta = { name = "tiny" } }))
io.stderr:write(string.format("spec/v2/models.lua: %s: ctr.wisp (%d features), ctr_v2.wisp, plain.wisp (5000), "
                               .. "plain_v2.wisp, tiny.wisp (10)\n", dir, nf))
