-- cli_raw_spec.lua — `wisp score --format tsv|csv|jsonl` end to end: the CLI's scores equal session:score_raw's for the same rows, bad lines, headers, schemas, format errors, `wisp info`.
local wisp = require "wisp"
local fc = require "wisp.columns"
local H = require "helpers"

local build = os.getenv("WISP_BUILD") or "build"
local WISP = build .. "/wisp"

local sh = H.sh

-- stdout and stderr apart
local function sh2(cmd)
    local err = H.tmpname()
    local out, rc = sh(cmd .. " 2>" .. err)
    local f = assert(io.open(err, "rb"))
    local e = f:read("*a")
    f:close()
    return out, e, rc
end

local write = H.write_file

local lines = H.lines

-- dense inputs only: every format can carry them
local spec = assert(fc.spec {
    fc.input("age", "float32", { default = 30 }),
    fc.input("uid", "int64"),
    fc.numeric("age", { normalizer = { type = "standard", mean = 38, std = 13 } }),
    fc.bucketized(fc.numeric("age"), { 18, 30, 65 }),
    fc.hash_bucket("city", 1000),
    fc.vocabulary_list("color", { "red", "green", "blue" }, { num_oov_buckets = 2 }),
    fc.identity("uid", 10),
    fc.crossed({ "city", "color" }, 500),
})
local NW = 2000

local cities = { "Paris", "Oslo", "São Paulo", "a city name longer than sixteen bytes", "x", "Rome, Italy", 'say "hi"' }
local colors = { "red", "green", "blue", "mauve", "" }

-- n random rows as Lua tables (ages exact in float32 and in decimal, so text and tables agree)
local function random_rows(n)
    local rows = {}
    for i = 1, n do
        local r = {
            age = math.random(0, 400) / 4,
            city = cities[math.random(#cities)],
            color = colors[math.random(#colors)],
            uid = math.random(0, 9),
        }
        if math.random() < 0.1 then r.age = nil end                   -- missing: the default
        rows[i] = r
    end
    return rows
end

local function csv_field(s)
    if s:find('[,"]') then return '"' .. s:gsub('"', '""') .. '"' end
    return s
end

local function num(v) return v == nil and "" or string.format("%.17g", v) end

local function to_tsv(rows)
    local t = { "label\tage\tcity\tcolor\tuid" }
    for i, r in ipairs(rows) do t[#t + 1] = table.concat({ i % 2, num(r.age), r.city, r.color, r.uid }, "\t") end
    return table.concat(t, "\n") .. "\n"
end

local function to_csv(rows)
    local t = { "uid,color,label,city,age" }                           -- another field order
    for i, r in ipairs(rows) do
        t[#t + 1] = table.concat({ r.uid, csv_field(r.color), i % 2, csv_field(r.city), num(r.age) }, ",")
    end
    return table.concat(t, "\r\n") .. "\r\n"
end

local function json_str(s) return '"' .. s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end) .. '"' end

local function to_jsonl(rows)
    local t = {}
    for _, r in ipairs(rows) do
        local f = { '"city": ' .. json_str(r.city), '"color": ' .. json_str(r.color), '"uid": ' .. r.uid }
        f[#f + 1] = '"age": ' .. (r.age == nil and "null" or num(r.age))
        t[#t + 1] = "{" .. table.concat(f, ", ") .. "}"
    end
    return table.concat(t, "\n") .. "\n"
end

-- a CLI line against a reference probability
local function same(line, p)
    if p ~= p then return line == "nan" end
    local v = tonumber(line)
    return v ~= nil and math.abs(v - p) <= 1e-9 + 1e-8 * p
end

describe("wisp score --format tsv|csv|jsonl", function()
    local model, plain, m, ref_rows, ref_p
    setup(function()
        model = H.tmpname(".wisp")
        local w = {}
        for i = 1, NW do w[i] = (math.random() - 0.5) * 2 end
        assert(wisp.write_model(model, w, { bias = -0.3, columns = spec:json() }))
        plain = H.tmpname(".wisp")
        assert(wisp.write_model(plain, { 0.1, 0.2, 0.3 }, { bias = 0 }))
        m = assert(wisp.load(model))
        -- the reference: the same rows through the Lua transformer and session:score_raw
        ref_rows = random_rows(2500)
        local t = assert(spec:transformer())
        assert(t:add_rows(ref_rows))
        local s = assert(m:session("cpu"))
        local out, n = assert(s:score_raw(t))
        ref_p = {}
        for i = 1, n do ref_p[i] = out[i - 1] end
        assert.equal(#ref_rows, n)
        s:close()
        t:close()
    end)
    teardown(function() H.cleanup() end)

    local function check_all(out, what)
        local l = lines(out)
        assert.equal(#ref_p, #l, what)
        for i = 1, #ref_p do
            if not same(l[i], ref_p[i]) then
                error(string.format("%s: row %d: CLI %s, score_raw %.9g", what, i, l[i], ref_p[i]))
            end
        end
    end

    it("scores TSV, CSV and JSON lines exactly as session:score_raw, in one piece or many", function()
        local files = {
            { H.tmpname(".tsv"), to_tsv(ref_rows), "" },
            { H.tmpname(".csv"), to_csv(ref_rows), "" },                 -- auto: csv by the name
            { H.tmpname(".jsonl"), to_jsonl(ref_rows), "" },             -- auto: jsonl by the name
            { H.tmpname(".txt"), to_csv(ref_rows), "--format csv" },
        }
        for _, f in ipairs(files) do
            write(f[1], f[2])
            for _, opt in ipairs { "", "--threads 1", "-b 7 --threads 2", "-b 1000 --threads 3" } do
                local cmd = WISP .. " score -m " .. model .. " -d cpu " .. f[3] .. " " .. opt .. " " .. f[1]
                local out, err, rc = sh2(cmd)
                assert.equal(0, rc, cmd .. ": " .. err)
                check_all(out, cmd)
            end
            -- streamed from stdin (the header read from the stream)
            local fmtopt = f[3] ~= "" and f[3] or "--format " .. f[1]:match("%.(%a+)$"):gsub("txt", "csv")
            local cmd = "cat " .. f[1] .. " | " .. WISP .. " score -m " .. model .. " -d cpu -b 100 " .. fmtopt
            local out, err, rc = sh2(cmd)
            assert.equal(0, rc, cmd .. ": " .. err)
            check_all(out, cmd)
        end
        -- the default device (a GPU where one is usable) agrees too
        local out, err, rc = sh2(WISP .. " score -m " .. model .. " " .. files[1][1])
        assert.equal(0, rc, err)
        check_all(out, "device auto")
    end)

    it("takes --schema criteo-like lists: named fields, skipped fields, no header", function()
        local t = {}
        for i, r in ipairs(ref_rows) do
            t[i] = table.concat({ "junk" .. i, r.uid, num(r.age), r.city, i, r.color }, "\t")
        end
        local f = H.tmpname(".tsv")
        write(f, table.concat(t, "\n"))                              -- no final newline
        local out, err, rc = sh2(WISP .. " score -m " .. model .. " -d cpu -b 333 --schema ,uid,age,city,,color " .. f)
        assert.equal(0, rc, err)
        check_all(out, "--schema list")
        -- the criteo schema names I1..I13, C1..C26: this model's inputs are not among them
        out, rc = sh(WISP .. " score -m " .. model .. " --format tsv --schema criteo " .. f)
        assert.equal(2, rc, out)
        assert.truthy(out:find("does not fit", 1, true), out)
        assert.truthy(out:find("input 'age'", 1, true), out)
    end)

    it("reports bad lines as FILE:LINE: reason, prints nan in their place and exits 1", function()
        local text = table.concat({
            "label\tage\tcity\tcolor\tuid",          -- line 1
            "1\t40\tParis\tred\t3",                   -- 2: good
            "1\tforty\tParis\tred\t3",                -- 3: not a number (the reader)
            "",                                       -- 4: blank, no row
            "0\t20\tOslo\tblue",                      -- 5: a field short (the reader)
            "0\tnan\tOslo\tblue\t1",                  -- 6: NaN in a numeric column (the transform)
            "0\t22\tRome\tgreen\t12",                 -- 7: identity out of range (the transform)
            "1\t\tRome\tgreen\t2",                    -- 8: good (age: the default)
            "1\t33\tRome\tgreen\t",                   -- 9: good (uid missing: -1, no feature)
        }, "\n") .. "\n"
        local f = H.tmpname(".tsv")
        write(f, text)
        -- the reference for the good rows
        local t = assert(spec:transformer())
        assert(t:add_rows { { age = 40, city = "Paris", color = "red", uid = 3 }, { city = "Rome", color = "green", uid = 2 },
                            { age = 33, city = "Rome", color = "green" } })
        local s = assert(m:session("cpu"))
        local p = assert(s:score_raw(t))
        for _, opt in ipairs { "-d cpu", "-d cpu -b 2 --threads 2", "-d cpu -b 1", "" } do
            local out, err, rc = sh2(WISP .. " score -m " .. model .. " " .. opt .. " " .. f)
            assert.equal(1, rc, opt .. ": " .. err)
            local l = lines(out)
            assert.equal(7, #l, opt)
            assert.is_true(same(l[1], p[0]), opt .. ": " .. l[1])
            for i = 2, 5 do assert.equal("nan", l[i], opt .. ": row " .. i) end
            assert.is_true(same(l[6], p[1]), opt .. ": " .. l[6])
            assert.is_true(same(l[7], p[2]), opt .. ": " .. l[7])
            local e = lines(err)
            assert.truthy(e[1]:find("^" .. f:gsub("%p", "%%%0") .. ":3: .*'forty' is not a number"), err)
            assert.truthy(e[2]:find(f .. ":5: ", 1, true), err)
            assert.truthy(e[3]:find(f .. ":6: ", 1, true) and e[3]:find("NaN", 1, true), err)
            assert.truthy(e[4]:find(f .. ":7: ", 1, true) and e[4]:find("12", 1, true), err)
            assert.equal(5, #e, err)
            assert.truthy(err:find("4 malformed lines scored as nan (reported above); 7 rows in all", 1, true), err)
        end
        s:close()
        t:close()
    end)

    it("refuses a header that does not fit the columns, naming the file and line", function()
        local f = H.tmpname(".tsv")
        write(f, "label\tage\tcity\tcolor\n1\t40\tParis\tred\n")           -- no uid
        local out, rc = sh(WISP .. " score -m " .. model .. " " .. f)
        assert.equal(1, rc, out)
        assert.truthy(out:find(f .. ":1: header: the fields do not include input 'uid'", 1, true), out)
        write(f, "\n\nage\tcity\tcolor\tuid\tage\n40\tParis\tred\t1\t40\n")  -- blank lines, then age twice
        out, rc = sh(WISP .. " score -m " .. model .. " " .. f)
        assert.equal(1, rc, out)
        assert.truthy(out:find(f .. ":3: header: input 'age' names two fields", 1, true), out)
        -- a header alone, and an empty file: no rows, no error
        write(f, "age\tcity\tcolor\tuid\n")
        out, rc = sh(WISP .. " score -m " .. model .. " " .. f)
        assert.equal(0, rc, out)
        assert.equal("", out)
        write(f, "")
        out, rc = sh(WISP .. " score -m " .. model .. " " .. f)
        assert.equal(0, rc, out)
        assert.equal("", out)
    end)

    it("says clearly when the model has no feature columns, or the options do not fit (exit 2)", function()
        local f = H.tmpname(".tsv")
        write(f, "age\tcity\tcolor\tuid\n40\tParis\tred\t1\n")
        for _, fmtname in ipairs { "tsv", "csv", "jsonl" } do
            local out, rc = sh(WISP .. " score -m " .. plain .. " --format " .. fmtname .. " " .. f)
            assert.equal(2, rc, out)
            assert.truthy(out:find("--format " .. fmtname .. " needs a model with feature columns", 1, true), out)
            assert.truthy(out:find(plain, 1, true), out)
        end
        -- auto on a model without columns: libsvm (the .tsv name does not matter)
        local lsv = H.tmpname(".tsv")
        write(lsv, "1 1:1\n")
        local out, rc = sh(WISP .. " score -m " .. plain .. " -d cpu " .. lsv)
        assert.equal(0, rc, out)
        assert.is_true(math.abs(tonumber(out) - 1 / (1 + math.exp(-0.2))) < 1e-6, out)
        out, rc = sh(WISP .. " score -m " .. model .. " --format libsvm --schema header " .. f)
        assert.equal(2, rc, out)
        assert.truthy(out:find("--schema is for --format tsv or csv", 1, true), out)
        out, rc = sh(WISP .. " score -m " .. model .. " --format jsonl --schema header " .. f)
        assert.equal(2, rc, out)
        out, rc = sh(WISP .. " score -m " .. model .. " --format parquet " .. f)
        assert.equal(2, rc, out)
        assert.truthy(out:find("unknown --format 'parquet'", 1, true), out)
        out, rc = sh(WISP .. " score -m " .. model .. " --schema age,age,city,color,uid " .. f)
        assert.equal(2, rc, out)
        assert.truthy(out:find("names two fields", 1, true), out)
    end)

    it("counts the transform in --stats and documents the formats in --help", function()
        local f = H.tmpname(".tsv")
        write(f, to_tsv(ref_rows))
        local _, err, rc = sh2(WISP .. " score -m " .. model .. " -d cpu --stats " .. f)
        assert.equal(0, rc, err)
        assert.truthy(err:find("2500 rows in", 1, true), err)
        assert.truthy(err:find("tsv input", 1, true), err)
        local ms = tonumber(err:match("transform ([%d.]+) ms"))
        assert.truthy(ms and ms > 0, err)
        local out = sh(WISP .. " score --help")
        for _, word in ipairs { "tsv", "csv", "jsonl", "--schema", "criteo", "auto (the default)" } do
            assert.truthy(out:find(word, 1, true), word)
        end
    end)

    it("wisp info lists the inputs and every column's slice", function()
        local out, rc = sh(WISP .. " info " .. model)
        assert.equal(0, rc, out)
        assert.truthy(out:find("inputs:     4", 1, true), out)
        assert.truthy(out:match("\n  uid%s+int64%s+dense\n"), out)
        assert.truthy(out:find("columns:    6 over ", 1, true), out)
        assert.truthy(out:match("\n  age_bucketized%s+bucketized%s+%[1, 5%)\n"), out)
        assert.truthy(out:match("\n  city_X_color%s+crossed%s+%[%d+, %d+%)\n"), out)
        out = sh(WISP .. " info " .. plain)
        assert.falsy(out:find("columns:", 1, true), out)
    end)
end)
