-- models.lua — test models and rows for spec/nginx/run.sh: `wisp run spec/nginx/models.lua DIR`.
--
-- DIR/ctr.wisp, DIR/ctr_v2.wisp  the same feature columns (numeric, bucketized, hash bucket,
--                                vocabulary, cross), different weights (the hot-reload pair)
-- DIR/plain.wisp                 no columns: 5000 features
-- DIR/rows.json                  {"instances": [...]} of raw rows for ctr (some with missing inputs)
-- DIR/rows.libsvm                the same rows after the columns transform, as libsvm lines (CLI input)
-- DIR/plain.json, plain.libsvm   rows for plain: {"ids":, "vals":} and the same as libsvm
local wisp = require "wisp"
local fc = require "wisp.columns"
local synth = require "wisp.synth"
local dir = assert(arg[1], "usage: models.lua DIR")
local cjson = require "cjson"

local rng = synth.rng(11)
local age = fc.numeric("age", { default = 30, normalizer = { type = "standard", mean = 38, std = 13 } })
local spec = assert(fc.spec {
    age,
    fc.bucketized(age, { 18, 25, 35, 50, 65 }),
    fc.hash_bucket("city", 1000),
    fc.vocabulary_list("color", { "red", "green", "blue" }, { num_oov_buckets = 2 }),
    fc.crossed({ "city", fc.bucketized(age, { 30, 60 }) }, 2000),
})
local nf = spec:num_features()
local function weights(seed)
    local r = synth.rng(seed)
    local w = {}
    for i = 1, nf do w[i] = r:normal() * 0.5 end
    return w
end
assert(wisp.write_model(dir .. "/ctr.wisp", weights(1), { bias = -0.3, columns = spec:json(), meta = { name = "ctr",
    v = "1" } }))
assert(wisp.write_model(dir .. "/ctr_v2.wisp", weights(2), { bias = 0.4, columns = spec:json(), meta = { name = "ctr",
    v = "2" } }))

local cities = { "Paris", "Lyon", "Berlin", "Madrid", "Oslo", "Rome", "Lima", "Quito" }
local colors = { "red", "green", "blue", "mauve", "teal" }
local rows = {}
for i = 1, 60 do
    local row = { age = math.floor(rng:next() * 900) / 10, city = cities[rng:int(#cities) + 1],
        color = colors[rng:int(#colors) + 1] }
    if i % 7 == 0 then row.age = nil end           -- missing: the default
    if i % 11 == 0 then row.color = nil end
    rows[i] = row
end
local f = assert(io.open(dir .. "/rows.json", "wb"))
f:write(cjson.encode { instances = rows }, "\n")
f:close()

local csr_lines = dofile("spec/nginx/csr_lines.lua")
local function libsvm_of(batch) return table.concat(csr_lines(batch, "%d:1"), "\n") .. "\n" end

local tr = assert(spec:transformer())
assert(tr:add_rows(rows))
local b = assert(tr:transform())
f = assert(io.open(dir .. "/rows.libsvm", "wb"))
f:write(libsvm_of(b))
f:close()

-- plain: 5000 features, no columns
local pw = {}
local r2 = synth.rng(5)
for i = 1, 5000 do pw[i] = r2:normal() * 0.4 end
assert(wisp.write_model(dir .. "/plain.wisp", pw, { bias = 0.1, meta = { name = "plain" } }))
local prow, plines = {}, {}
for i = 1, 40 do
    local ids, vals, parts = {}, {}, { "1" }
    local n = 1 + r2:int(12)
    for k = 1, n do
        ids[k] = r2:int(5000)
        vals[k] = math.floor(r2:next() * 1000) / 250
        parts[#parts + 1] = string.format("%d:%.9g", ids[k], vals[k])
    end
    prow[i] = (i % 5 == 0) and { ids = ids } or { ids = ids, vals = vals }
    if i % 5 == 0 then parts = { "1" }; for k = 1, n do parts[#parts + 1] = tostring(ids[k]) end end
    plines[i] = table.concat(parts, " ")
end
f = assert(io.open(dir .. "/plain.json", "wb")); f:write(cjson.encode { instances = prow }, "\n"); f:close()
f = assert(io.open(dir .. "/plain.libsvm", "wb")); f:write(table.concat(plines, "\n"), "\n"); f:close()
io.stderr:write(string.format("models.lua: %s: ctr.wisp (%d features, columns), ctr_v2.wisp, plain.wisp, 60 + 40 "
    .. "rows\n", dir, nf))

-- request bodies for the spec: single rows, rows with bad entries, all bad
local function write_json(name, t)
    local fh = assert(io.open(dir .. "/" .. name, "wb")); fh:write(cjson.encode(t)); fh:close()
end
for i = 1, 24 do write_json(string.format("one_%d.json", i), { instances = { rows[i] } }) end
local t = {}
for i = 1, 10 do t[i] = rows[i] end
t[3] = { age = "old", city = "Paris" }          -- a string for a float input
t[6] = { nosuch = 1 }                            -- an unknown input
t[8] = 42                                        -- not an object
write_json("badrows.json", { instances = t })
write_json("allbad.json", { instances = { { nosuch = 1 }, 7 } })
local q = {}
for i = 1, 6 do q[i] = prow[i] end
q[2] = { ids = { 1, -4 } }
q[4] = { ids = { 1, 2 }, vals = { 1 } }
q[5] = { vals = { 1 } }
write_json("plainbad.json", { instances = q })

-- JSON lines (application/x-ndjson) bodies of the same raw rows: rows.ndjson (the 60 rows,
-- one object a line: also the CLI's `wisp score --format jsonl` input), badrows.ndjson (a
-- blank first line, then rows 1..10 with three bad: a string for a float input at line 4,
-- an unknown input at line 7, invalid JSON at line 9), rows101.ndjson (over the row limit)
local function write_lines(name, lines)
    local fh = assert(io.open(dir .. "/" .. name, "wb")); fh:write(table.concat(lines, "\n"), "\n"); fh:close()
end
local nd = {}
for i = 1, #rows do nd[i] = cjson.encode(rows[i]) end
write_lines("rows.ndjson", nd)
local ndbad = { "" }
for i = 1, 10 do ndbad[#ndbad + 1] = nd[i] end
ndbad[4] = '{"age": "old", "city": "Paris"}'
ndbad[7] = '{"nosuch": 1}'
ndbad[9] = '{"age": 3'
write_lines("badrows.ndjson", ndbad)
local nd101 = {}
for i = 1, 101 do nd101[i] = nd[(i - 1) % #nd + 1] end
write_lines("rows101.ndjson", nd101)
-- the {"instances"} fast path (the commas between instances become newlines): strings with
-- quotes, braces, commas and escapes; pretty-printed (newlines inside and between instances)
local tricky = { '{"city": "a\\"},{[", "age": 3}', '{"city": "x,y\\n]", "color": "red"}',
    '{ "age" : 7.5 ,\n "city":"\\u00e9t\\u00e9" }', '{}' }
local fh = assert(io.open(dir .. "/tricky.json", "wb"))
fh:write(' {\n "instances" : [\n  ', table.concat(tricky, ' ,\n  '), '\n ]\n}\n'); fh:close()
for i = 1, #tricky do tricky[i] = tricky[i]:gsub("\n", " ") end
write_lines("tricky.ndjson", tricky)

-- ints.wisp: an int64 input hashed into buckets (issue 14, class 1: an int64 above 2^53 must
-- score by its exact value on every path). ints.ndjson: the rows, one a line (the CLI's
-- input and the truth); ints.json: the same {"instances"}; ints_sig.json: with a
-- "signature_name" key before them; ints_bad.json: with a bad row (a string for the int)
-- in the middle (index 2), the others as in ints.ndjson
local ispec = assert(fc.spec { fc.hash_bucket("uid", 100003, { dtype = "int64" }), fc.numeric("x", { default = 0 }) })
local iw = {}
local r3 = synth.rng(9)
for i = 1, ispec:num_features() do iw[i] = r3:normal() end
assert(wisp.write_model(dir .. "/ints.wisp", iw, { bias = 0.05, columns = ispec:json(), meta = { name = "ints" } }))
local ilines = { '{"uid": 9007199254740993, "x": 0.5}', '{"uid": 9007199254740992, "x": 0.5}',
                 '{"uid": 9223372036854775807, "x": 1}', '{"uid": 9007199254740995}', '{"uid": 12345, "x": -2}' }
write_lines("ints.ndjson", ilines)
fh = assert(io.open(dir .. "/ints.json", "wb")); fh:write('{"instances": [', table.concat(ilines, ", "),
    ']}\n'); fh:close()
fh = assert(io.open(dir .. "/ints_sig.json", "wb"))
fh:write('{"signature_name": "serving_default", "instances": [', table.concat(ilines, ", "), ']}\n'); fh:close()
local ibad = { ilines[1], ilines[2], '{"uid": "12"}', ilines[3], ilines[4], ilines[5] }
fh = assert(io.open(dir .. "/ints_bad.json", "wb")); fh:write('{"instances": [', table.concat(ibad, ", "),
    ']}\n'); fh:close()
write_lines("ints_bad.ndjson", ibad)
