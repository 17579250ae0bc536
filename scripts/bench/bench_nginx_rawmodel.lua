-- bench_nginx_rawmodel.lua — scripts/bench/bench_nginx.sh --raw-bodies: a model with feature columns and 100 raw rows sent three ways.
--   wisp run scripts/bench/bench_nginx_rawmodel.lua DIR -> DIR/model.wisp (13 numeric I1..I13 + 26
--   hash buckets C1..C26 of 2^18), DIR/hundred_raw.json ({"instances": [...]}; hundred_raw_cjson.json
--   the same plus a key "note", for which the service also decodes the body with cjson: see below), DIR/hundred.ndjson
--   (the same rows as JSON lines), DIR/hundred.libsvm (the same rows after the transform)
local wisp, fc, synth, cjson = require "wisp", require "wisp.columns", require "wisp.synth", require "cjson"
local dir = assert(arg[1], "usage: bench_nginx_rawmodel.lua DIR")
local cols = {}
for i = 1, 13 do cols[#cols + 1] = fc.numeric("I" .. i, { default = 0 }) end
for i = 1, 26 do cols[#cols + 1] = fc.hash_bucket("C" .. i, 2^18) end
local spec = assert(fc.spec(cols))
local nf, rng = spec:num_features(), synth.rng(42)
local w = {}
for i = 1, nf do w[i] = rng:normal() * 0.05 end
assert(wisp.write_model(dir .. "/model.wisp", w, { bias = -0.5, columns = spec:json() }))
local zipf = synth.zipf(100000, 1.1)
local rows, lines = {}, {}
for r = 1, 100 do
    local row = {}
    for i = 1, 13 do if rng:next() > 0.1 then row["I" .. i] = math.floor(rng:next() * 1000) / 10 end end
    for i = 1, 26 do row["C" .. i] = string.format("%08x", (zipf:sample(rng:next()) * 2654435761 + i) % 2^32) end
    rows[r] = row; lines[r] = cjson.encode(row)
end
local f = assert(io.open(dir .. "/hundred_raw.json", "wb")); f:write(cjson.encode { instances = rows }, "\n"); f:close()
-- the same with one more key: the C parser still reads the instances (lua/wisp/nginx/v1/instances.lua skips
-- the key) and lua/wisp/nginx/v1/decode.lua also decodes the whole body with cjson, to check that it is JSON
f = assert(io.open(dir .. "/hundred_raw_cjson.json", "wb")); f:write(cjson.encode { instances = rows, note = "x" }, "\n"); f:close()
f = assert(io.open(dir .. "/hundred.ndjson", "wb")); f:write(table.concat(lines, "\n"), "\n"); f:close()
local tr = assert(spec:transformer()); assert(tr:add_rows(rows))
local csr = assert(tr:transform()):csr()
local out = {}
for r = 1, #csr.indptr - 1 do
    local parts, a, z = { "0" }, csr.indptr[r], csr.indptr[r + 1]
    local va, vz = 0, 0
    if csr.val_ptr then va, vz = csr.val_ptr[r], csr.val_ptr[r + 1] end
    for k = a, z - 1 do
        local vi = va + (k - a)
        parts[#parts + 1] = vi < vz and string.format("%d:%.9g", csr.ids[k + 1], csr.vals[vi + 1]) or (csr.ids[k + 1] .. ":1")
    end
    out[r] = table.concat(parts, " ")
end
f = assert(io.open(dir .. "/hundred.libsvm", "wb")); f:write(table.concat(out, "\n"), "\n"); f:close()
