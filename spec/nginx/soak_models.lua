-- soak_models.lua — the third version for spec/nginx/soak.sh: `wisp run spec/nginx/soak_models.lua DIR` writes DIR/v3.wisp (v1's columns, other weights).
local wisp = require "wisp"
local fc = require "wisp.columns"
local synth = require "wisp.synth"
local dir = assert(arg[1], "usage: soak_models.lua DIR")
local m = assert(wisp.load(dir .. "/v1.wisp"))
local spec = assert(fc.from_model(m))
local r = synth.rng(3)
local w = {}
for i = 1, spec:num_features() do w[i] = r:normal() * 0.5 end
assert(wisp.write_model(dir .. "/v3.wisp", w, { bias = 0.05, columns = spec:json(), meta = { name = "ctr", v = "3" } }))
