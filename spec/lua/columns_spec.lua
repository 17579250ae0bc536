-- columns_spec.lua — feature columns: TensorFlow golden vectors (spec/data/tf_golden_columns.json), the Lua builder, raw rows from tables/TSV/JSON lines, bad input, and scores from .wisp files with columns.
local ffi = require "ffi"
local wisp = require "wisp"
local fc = require "wisp.columns"
local C = require "wisp.cdef"
local H = require "helpers"
local cjson = require "cjson.safe"

local huge = math.huge

local function read(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

local golden = assert(cjson.decode(read("spec/data/tf_golden_columns.json")))

-- golden JSON values -> Lua values: {"hex"} bytes, {"int"} int64 cdata, "nan"/"inf" for float inputs
local function int64_of(s)
    local neg = s:sub(1, 1) == "-"
    local v = 0LL
    for d in s:gmatch("%d") do v = v * 10 - tonumber(d) end      -- accumulate negatively: reaches INT64_MIN
    if not neg then v = -v end
    return v
end

local function lua_value(v, dtype)
    if type(v) == "table" and v.hex then
        return (v.hex:gsub("..", function(h) return string.char(tonumber(h, 16)) end))
    elseif type(v) == "table" and v.int then
        return int64_of(v.int)
    elseif dtype == "float32" and type(v) == "string" then
        return ({ nan = 0 / 0, inf = huge, ["-inf"] = -huge })[v]
    end
    return v
end

local function lua_row(row, dtypes)
    local out = {}
    for k, v in pairs(row) do
        if type(v) == "table" and v.hex == nil and v.int == nil then
            local l = {}
            for i, x in ipairs(v) do l[i] = lua_value(x, dtypes[k]) end
            out[k] = l
        else
            out[k] = lua_value(v, dtypes[k])
        end
    end
    return out
end

-- The features of batch row r (0-based) inside [off, off+size): sorted local ids, and values by id.
local function row_slice(csr, r, off, size)
    local ids, vals = {}, {}
    local a, z = csr.indptr[r + 1], csr.indptr[r + 2]
    local va = csr.val_ptr and csr.val_ptr[r + 1] or nil
    local nvals = csr.val_ptr and (csr.val_ptr[r + 2] - va) or (csr.vals and (z - a) or 0)
    for k = a, z - 1 do
        local id = csr.ids[k + 1]
        if id >= off and id < off + size then
            ids[#ids + 1] = id - off
            if k - a < nvals then
                vals[id - off] = csr.val_ptr and csr.vals[va + (k - a) + 1] or csr.vals[k + 1]
            end
        end
    end
    table.sort(ids)
    return ids, vals
end

local function sorted_nonneg(list)
    local out = {}
    for _, v in ipairs(list) do if v >= 0 then out[#out + 1] = v end end
    table.sort(out)
    return out
end

local function same_f32(want, got)
    if want == "nan" then return got ~= got end
    if want == "inf" then return got == huge end
    if want == "-inf" then return got == -huge end
    return H.f32(want) == got
end

-- Every golden case through the Lua-table path; returns nothing, asserts.
local function check_case(case, spec)
    local t = assert(spec:transformer())
    local dtypes = {}
    for _, inp in ipairs(spec:input_list()) do dtypes[inp.name] = inp.dtype end
    for _, row in ipairs(case.rows) do assert(t:add(lua_row(row, dtypes))) end
    local b = assert(t:transform())
    assert.are.equal(#case.rows, b:rows())
    assert.are.same({}, b:bad_rows())
    local csr = b:csr()
    for _, s in ipairs(spec:slices()) do
        local want = case.expect[s.name]
        assert.is_not_nil(want, "no expectation for column " .. s.name)
        for r = 1, #case.rows do
            local ids, vals = row_slice(csr, r - 1, s.offset, s.size)
            if s.type == "numeric" then
                assert.are.same({ 0 }, ids, case.name .. " " .. s.name .. " row " .. r)
                assert.is_true(same_f32(want[r], vals[0]),
                    ("%s %s row %d: TensorFlow %s, wisp %.9g"):format(case.name, s.name, r, tostring(want[r]), vals[0]))
            else
                assert.are.same(sorted_nonneg(want[r]), ids, case.name .. " " .. s.name .. " row " .. r)
            end
        end
    end
    t:close()
end

describe("feature columns: TensorFlow golden vectors", function()
    it("were made by TensorFlow", function()
        assert.matches("^spec/data/gen/tf_golden.py", golden.generator)
        assert.is_true(#golden.cases >= 10)
    end)
    for _, case in ipairs(golden.cases) do
        it(case.name .. " (" .. case.note .. ")", function()
            local spec = assert(fc.parse(case.description))
            check_case(case, spec)
        end)
    end

    it("the published crossed_column vector", function()
        local h = 0xDECAFCAFFEULL
        for _, s in ipairs { "batch1-FC1-F1", "batch1-FC2-F1", "batch1-FC3-F1" } do
            h = fc.fingerprint_cat64(h, fc.fingerprint64(s))
        end
        assert.are.equal(1971693436396284976ULL, h % 0x7FFFFFFFFFFFFFFFULL)
        assert.are.equal(83ULL, h % 100)
    end)
end)

describe("feature columns: the Lua builder", function()
    local function golden_case(name)
        for _, c in ipairs(golden.cases) do if c.name == name then return c end end
    end

    it("builds the Criteo-like case's description and gets TensorFlow's ids", function()
        local cols = {}
        for k = 1, 3 do cols[#cols + 1] = fc.input("I" .. k, "float32", { default = 0 }) end
        local bk = {}
        for k = 1, 3 do
            local num = fc.numeric("I" .. k, { normalizer = { type = "standard", mean = 3.5, std = 12.25 } })
            cols[#cols + 1] = num
            bk[k] = fc.bucketized(fc.numeric("I" .. k), { 0, 1, 2, 4, 8, 16, 32, 64, 128 })
            cols[#cols + 1] = bk[k]
        end
        for k = 1, 4 do cols[#cols + 1] = fc.hash_bucket("C" .. k, 100000) end
        cols[#cols + 1] = fc.crossed({ "C1", "C2" }, 1000000)
        cols[#cols + 1] = fc.crossed({ "C3", bk[1] }, 1000000)
        local spec = assert(fc.spec(cols))
        local names = {}
        for _, s in ipairs(spec:slices()) do names[#names + 1] = s.name end
        assert.are.same({ "I1", "I1_bucketized", "I2", "I2_bucketized", "I3", "I3_bucketized", "C1", "C2", "C3", "C4",
                          "C1_X_C2", "C3_X_I1_bucketized" }, names)
        check_case(golden_case("criteo_like"), spec)
    end)

    it("names columns as TensorFlow does and lays out slices in order", function()
        local age = fc.numeric("age")
        local spec = assert(fc.spec { age, fc.bucketized(age, { 18, 30 }), fc.hash_bucket("city", 10),
                                      fc.crossed({ "city", fc.bucketized(age, { 18, 30 }) }, 7),
                                      fc.vocabulary_list("color", { "r", "g" }, { num_oov_buckets = 3 }),
                                      fc.identity("uid", 5, { default_value = 0 }) })
        assert.are.same({
            { name = "age", type = "numeric", offset = 0, size = 1 },
            { name = "age_bucketized", type = "bucketized", offset = 1, size = 3 },
            { name = "city", type = "hash_bucket", offset = 4, size = 10 },
            { name = "age_bucketized_X_city", type = "crossed", offset = 14, size = 7 },
            { name = "color", type = "vocabulary_list", offset = 21, size = 5 },
            { name = "uid", type = "identity", offset = 26, size = 5 },
        }, spec:slices())
        assert.are.equal(31, spec:num_features())
        assert.are.same({ { name = "age", dtype = "float32", sparse = false }, { name = "city", dtype = "string", sparse = false },
                          { name = "color", dtype = "string", sparse = false }, { name = "uid", dtype = "int64", sparse = false } },
                        spec:input_list())
        -- the text parses back to the same slices
        local again = assert(fc.parse(spec:json()))
        assert.are.same(spec:slices(), again:slices())
    end)

    it("refuses what TensorFlow refuses, at the caller's line", function()
        local ok, err = pcall(function() local c = fc.crossed({ fc.hash_bucket("a", 10), "b" }, 10); return c end)
        assert.is_false(ok)
        assert.matches("hash_bucket column cannot be crossed", err)
        assert.matches("columns_spec.lua", err)
        assert.has_error(function() fc.bucketized(fc.numeric("x"), { 1, 1 }) end)
        assert.has_error(function() fc.vocabulary_list("c", { "a", "a" }) end)
        assert.has_error(function() fc.vocabulary_list("c", { "a" }, { num_oov_buckets = 1, default_value = 0 }) end)
        assert.has_error(function() fc.hash_bucket("c", 0) end)
        assert.has_error(function() fc.crossed({ "a" }, 10) end)
    end)

    it("reports conflicting and duplicate names as runtime errors", function()
        local spec, err = fc.spec { fc.hash_bucket("a", 10), fc.hash_bucket("a", 20) }
        assert.is_nil(spec)
        assert.matches("two columns are named 'a'", err)
        spec, err = fc.spec { fc.hash_bucket("a", 10), fc.identity("a", 5, { name = "a_id" }) }
        assert.is_nil(spec)
        assert.matches("input 'a' is used as string and as int64", err)
    end)
end)

describe("feature columns: descriptions", function()
    local base = [[{"format":"wisp-columns","version":1,"inputs":[{"name":"a","dtype":"string"},{"name":"x","dtype":"float32"}],
"columns":[%s]}]]
    local function parse(cols) return fc.parse(base:format(cols)) end

    it("says where a description is wrong", function()
        local cases = {
            { '{"name":"a","type":"hash","key":"a","buckets":3,"offset":0}', "line 2, column %d+: columns%[0%] 'a': unknown column type 'hash'" },
            { '{"name":"a","type":"hash_bucket","key":"b","buckets":3,"offset":0}', "unknown input 'b'" },
            { '{"name":"a","type":"hash_bucket","key":"a","bucket":3,"offset":0}', "unknown field \"bucket\"" },
            { '{"name":"a","type":"hash_bucket","key":"a","buckets":3.5,"offset":0}', "buckets must be an integer" },
            { '{"name":"a","type":"hash_bucket","key":"a","buckets":3}', "missing \"offset\"" },
            { '{"name":"a","type":"hash_bucket","key":"x","buckets":3,"offset":0}', "needs a string or int64 input" },
            { '{"name":"c","type":"crossed","keys":[{"type":"hash_bucket","key":"a","buckets":3},"a"],"buckets":9,"offset":0}',
              "a hash_bucket column cannot be crossed" },
            { '{"name":"v","type":"vocabulary_list","key":"a","vocabulary":["p","q","p"],"offset":0}', "repeats vocabulary%[0%]" },
            { '{"name":"a","type":"hash_bucket","key":"a","buckets":3,"offset":0},{"name":"b","type":"hash_bucket","key":"a","buckets":3,"offset":2}',
              "overlap" },
            { '{"name":"b","type":"bucketized","source":{"type":"numeric","key":"x"},"boundaries":[1,0],"offset":0}', "boundaries must increase" },
            { '{"name":"a","type":"hash_bucket","key":"a","buckets":3,"offset":0,"size":4}', "size is 4 but the column has 3 weights" },
            { '{"name":"a","type":"hash_bucket","key":"a","buckets":3,"offset":0,}', "expected a key string" },
        }
        for _, c in ipairs(cases) do
            local spec, err = parse(c[1])
            assert.is_nil(spec, c[1])
            assert.matches(c[2], err)
            assert.matches("^columns: ", err)
        end
        local spec, err = fc.parse('{"format":"wisp-columns","version":2,"inputs":[],"columns":[]}')
        assert.is_nil(spec)
        assert.matches("version 2 is not supported", err)
    end)
end)

describe("feature columns: raw rows", function()
    local spec = assert(fc.spec {
        fc.input("age", "float32", { default = 30 }),
        fc.input("tags", "string", { sparse = true }),
        fc.input("uid", "int64"),
        fc.numeric("age"),
        fc.bucketized(fc.numeric("age"), { 18, 65 }),
        fc.hash_bucket("city", 1000),
        fc.hash_bucket("tags", 100),
        fc.identity("uid", 10),
        fc.crossed({ "city", "tags" }, 500),
    })
    local age_off = spec:slice("age")
    local bk_off = spec:slice("age_bucketized")
    local city_off = spec:slice("city")

    local function one(row)
        local t = assert(spec:transformer())
        assert(t:add(row))
        local b = assert(t:transform())
        return b, b:csr(), b:bad_rows()
    end

    local function bad(row, pattern)
        local b, _, list = one(row)
        assert.are.equal(1, b:bad_count(), "row not bad, wanted " .. pattern)
        assert.matches(pattern, list[1].msg)
        assert.matches("^row 0: ", list[1].msg)
    end

    it("fills dense defaults and leaves sparse inputs empty", function()
        local _, csr = one { city = "Paris", uid = 3 }
        local ids, vals = row_slice(csr, 0, age_off, 1)
        assert.are.same({ 0 }, ids)
        assert.are.equal(30, vals[0])
        assert.are.same({ 1 }, (row_slice(csr, 0, bk_off, 3)))
        assert.are.same({ tonumber(fc.fingerprint64("Paris") % 1000) }, (row_slice(csr, 0, city_off, 1000)))
        -- no tags: no tag ids, no cross ids
        assert.are.equal(1 + 1 + 1 + 1, #csr.ids)
    end)

    it("drops TensorFlow's missing markers in categorical columns: '' and -1", function()
        local _, csr = one { city = "", uid = -1 }
        assert.are.equal(2, #csr.ids)      -- age and its bucket only
    end)

    it("crosses every combination of a sparse list", function()
        local _, csr = one { city = "Rome", tags = { "a", "b", "a" }, uid = 1 }
        local off, size = spec:slice("city_X_tags")
        local ids = row_slice(csr, 0, off, size)
        assert.are.equal(3, #ids)
    end)

    it("marks bad rows with a clear message", function()
        bad({ age = "old" }, "input 'age': a string where float32 is expected")
        bad({ city = 12 }, "input 'city': a number where a string is expected")
        bad({ uid = 1.5 }, "input 'uid': 1.5 where int64 is expected")
        bad({ cty = "Paris" }, "unknown input 'cty'")
        bad({ city = { "a", "b" } }, "input 'city' is dense and takes one value per row")
        bad({ age = true }, "input 'age': a boolean is not a value")
        bad({ age = 0 / 0 }, "column 'age': the value is NaN")
        bad({ age = huge }, "column 'age': the value is %+inf")
        bad({ uid = 12 }, "12 is outside the identity column's %[0, 10%)")
        bad({ city = string.rep("x", 65537) }, "more than WISP_MAX_STRING_BYTES")
        bad({ [1] = "x" }, "row keys must be input names")
    end)

    it("hashes bytes that are not UTF-8 as they are, like TensorFlow", function()
        local _, csr, list = one { city = "\255\254" }
        assert.are.same({}, list)
        assert.are.same({ tonumber(fc.fingerprint64("\255\254") % 1000) }, (row_slice(csr, 0, city_off, 1000)))
    end)

    it("scores bad rows as NaN through a model with columns", function()
        local path = H.tmpname(".wisp")
        local n = spec:num_features()
        local w = {}
        for i = 1, n do w[i] = (i % 7 - 3) * 0.125 end
        assert(wisp.write_model(path, w, { bias = 0.25, columns = spec:json() }))
        local m = assert(wisp.load(path))
        local s2 = assert(fc.from_model(m))
        assert.are.same(spec:slices(), s2:slices())
        local t = assert(s2:transformer())
        assert(t:add { age = 70, city = "Oslo", tags = { "x" }, uid = 4 })
        assert(t:add { age = "x" })
        local b = assert(t:transform())
        local p = assert(m:session("cpu"):score_table(b))
        -- float64 reference from the features
        local csr = b:csr()
        local z = 0.25
        for k = csr.indptr[1], csr.indptr[2] - 1 do
            local id = csr.ids[k + 1]
            local v = (csr.val_ptr and k - csr.indptr[1] < csr.val_ptr[2] - csr.val_ptr[1]) and csr.vals[k + 1] or 1
            z = z + w[id + 1] * v
        end
        assert.is_true(math.abs(p[1] - 1 / (1 + math.exp(-z))) < 1e-6)
        assert.is_true(p[2] ~= p[2])
        H.cleanup()
    end)
end)

describe("feature columns: text inputs", function()
    local cols = {}
    for k = 1, 13 do cols[#cols + 1] = fc.input("I" .. k, "float32", { default = 0 }) end
    for k = 1, 13 do cols[#cols + 1] = fc.bucketized(fc.numeric("I" .. k), { 0, 1, 10, 100 }) end
    for k = 1, 26 do cols[#cols + 1] = fc.hash_bucket("C" .. k, 1000) end
    cols[#cols + 1] = fc.crossed({ "C1", "C2" }, 10000)
    local spec = assert(fc.spec(cols))

    local function criteo_line(r)
        local f = { tostring(r % 2) }
        for k = 1, 13 do f[#f + 1] = (k + r) % 4 == 0 and "" or tostring((r * 7 + k * 13) % 300 - 5) end
        for k = 1, 26 do f[#f + 1] = (k + r) % 5 == 0 and "" or ("%08x"):format((r * 2654435761 + k * 40503) % 2 ^ 32) end
        return table.concat(f, "\t")
    end

    local function row_table(line)
        local f, row = {}, {}
        for x in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = x end
        for k = 1, 13 do if f[1 + k] ~= "" then row["I" .. k] = tonumber(f[1 + k]) end end
        for k = 1, 26 do if f[14 + k] ~= "" then row["C" .. k] = f[14 + k] end end
        return row
    end

    it("reads the Criteo TSV layout exactly as the same rows given as tables", function()
        local lines = {}
        for r = 1, 200 do lines[r] = criteo_line(r) end
        local text = table.concat(lines, "\n") .. "\n"
        local t1 = assert(spec:transformer())
        local consumed, nlines = assert(t1:parse_tsv(text, { schema = "criteo" }))
        assert.are.equal(#text, consumed)
        assert.are.equal(200, nlines)
        local t2 = assert(spec:transformer())
        for r = 1, 200 do assert(t2:add(row_table(lines[r]))) end
        assert.are.same(assert(t2:transform()):csr(), assert(t1:transform()):csr())
        -- the same rows as JSON lines
        local t3 = assert(spec:transformer())
        local j = {}
        for r = 1, 200 do j[r] = assert(cjson.encode(row_table(lines[r]))) end
        assert(t3:parse_jsonl(table.concat(j, "\n")))
        assert.are.same(assert(t2:transform()):csr(), assert(t3:transform()):csr())
    end)

    it("reports bad lines with their line numbers", function()
        local good = criteo_line(1)
        local short = good:gsub("\t[^\t]*$", "")
        local badnum = good:gsub("^(%d)\t[^\t]*", "%1\tabc")
        local t = assert(spec:transformer())
        assert(t:parse_tsv(table.concat({ good, short, "", badnum, good .. "\r" }, "\n"), { schema = "criteo" }))
        local list = t:bad_rows()
        assert.are.equal(4, t:rows())
        assert.are.equal(2, #list)
        assert.matches("^line 2: 39 fields, the schema has 40", list[1].msg)
        assert.matches("^line 4: field 2 %(I1%): 'abc' is not a number", list[2].msg)
        local b = assert(t:transform())
        assert.are.equal(2, b:bad_count())
        assert.are.same({ 2, 4 }, { b:bad_rows()[1].line, b:bad_rows()[2].line })
    end)

    it("takes a header, and refuses one that lacks an input", function()
        local t = assert(spec:transformer())
        local names = { "label" }
        for k = 1, 13 do names[#names + 1] = "I" .. k end
        for k = 1, 26 do names[#names + 1] = "C" .. k end
        assert(t:parse_tsv(table.concat(names, ",") .. "\n" .. criteo_line(3):gsub("\t", ",") .. "\n",
                           { schema = "header", delim = "," }))
        assert.are.equal(1, t:rows())
        assert.are.same({}, t:bad_rows())
        local t2 = assert(spec:transformer())
        local ok, err = t2:parse_tsv("label,I1\n1,2\n", { schema = "header", delim = "," })
        assert.is_nil(ok)
        assert.matches("line 1: header: the fields do not include input 'I2'", err)
    end)

    it("understands quoted CSV fields", function()
        local s = assert(fc.spec { fc.hash_bucket("a", 1000), fc.hash_bucket("b", 1000) })
        local t = assert(s:transformer())
        assert(t:parse_tsv('"x,y","say ""hi"""\n"open,z\n', { schema = "a,b", delim = "," }))
        assert.are.same({ { "x,y" }, { "" } }, t:input_values("a"))   -- a bad row keeps a placeholder
        assert.are.same({ { 'say "hi"' }, { "" } }, t:input_values("b"))
        assert.matches("unterminated quoted field", t:bad_rows()[1].msg)
    end)

    it("reads JSON lines and rejects what is not valid for them", function()
        local s = assert(fc.spec { fc.input("tags", "string", { sparse = true }), fc.input("n", "int64"),
                                   fc.hash_bucket("tags", 50), fc.hash_bucket("c", 50), fc.identity("n", 100, { default_value = 0 }) })
        local t = assert(s:transformer())
        local lines = {
            '{"tags": ["a", "b"], "c": "x", "n": 5}',
            '{"c": null, "tags": []}',
            '{"c": "\255"}',
            '{"c": "x", "oops": 1}',
            '{"n": 1.5}',
            '{"n": "5"}',
            '{"c": "x"',
            '[1, 2]',
            '{"tags": [["a"]]}',
            '{"c": "caf\\u00e9", "n": 9223372036854775807}',
        }
        assert(t:parse_jsonl(table.concat(lines, "\n")))
        assert.are.equal(#lines, t:rows())
        local msgs = {}
        for _, b in ipairs(t:bad_rows()) do msgs[b.line] = b.msg end
        assert.is_nil(msgs[1]); assert.is_nil(msgs[2]); assert.is_nil(msgs[10])
        assert.matches("invalid UTF%-8", msgs[3])
        assert.matches("unknown input 'oops'", msgs[4])
        assert.matches("1.5 is not an int64", msgs[5])
        assert.matches("a string where int64 is expected", msgs[6])
        assert.matches("invalid JSON", msgs[7])
        assert.matches("expected an object", msgs[8])
        assert.matches("an array may hold only strings or numbers", msgs[9])
        assert.are.same({ { "a", "b" }, {}, {}, {}, {}, {}, {}, {}, {}, {} }, t:input_values("tags"))
        assert.are.same("café", t:input_values("c")[10][1])
        assert.are.equal(9223372036854775807LL, t:input_values("n")[10][1])
    end)
end)

describe("feature columns: FFI declarations", function()
    it("resolve in the library", function()
        for _, name in ipairs { "wisp_fingerprint64", "wisp_columns_parse", "wisp_columns_from_model", "wisp_raw_new",
                                "wisp_raw_parse_tsv", "wisp_raw_parse_jsonl", "wisp_raw_input", "wisp_transform" } do
            assert.is_not_nil(C[name])
        end
    end)
end)
