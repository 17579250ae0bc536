-- property.lua — the service's property test (issue 14, class 1): rows, requests and references; the answers checked bit for bit.
--
--   wisp run spec/nginx/property.lua gen DIR SEED     models, rows, request bodies, DIR/curl.cfg, DIR/plan.txt
--   wisp run spec/nginx/property.lua ref DIR          DIR/*.ref: the CPU's probabilities (Lua API, %.9g: exact
--                                                     float32), checked against `wisp score -d cpu` (DIR/*.cli)
--   wisp run spec/nginx/property.lua check DIR OUT CONFIG   every answer under OUT against the references
-- spec/nginx/property.sh runs the three and nginx in between (one configuration a time).
--
-- The property: a row gets the same float32 probability, bit for bit, whatever the route (libsvm
-- body, JSON {"instances"} with or without other keys, JSON lines, one row or many), the mode
-- (inline, thread, async, auto, batching) and its neighbours (bad rows in the same request); a
-- row the CPU reference finds bad is null with an "errors" entry on every route, and every null
-- has its entry. Rows are random (seeded): valued, binary and mixed id rows, ids at 0,
-- num_features-1 and beyond (2^32+1: a path that narrows ids makes it id 1), duplicate ids, empty
-- rows, values at float32's edges (max finite, the overflow threshold, min normal, subnormal,
-- -0, 1e-45) written in as many digits as needed to land next to a rounding midpoint (a value
-- that passes through a double on one path rounds differently there: the columns model puts a
-- bucket boundary on such a float32, so one ulp moves a whole feature), int64 inputs at and
-- beyond 2^53 and 2^63, strings with escapes, UTF-8 and surrogate pairs, missing inputs.
-- The CLI prints 9 decimals (fixed point: fewer significant digits below 0.1); the reference
-- is the Lua API's %.9g, and each reference line must print as the CLI's line does.
local ffi = require "ffi"
local cmd, dir = arg[1], arg[2]
local fmt, concat = string.format, table.concat

local function readf(p)
    local f = io.open(p, "rb"); if not f then return nil end
    local s = f:read("*a"); f:close(); return s
end
local function writef(p, s)
    local f = assert(io.open(p, "wb")); f:write(s); f:close()
end
local function lines_of(p)
    local t = {}
    for l in io.lines(p) do t[#t + 1] = l end
    return t
end
local f32box = ffi.new("float[1]")
local function f32(x) f32box[0] = x; return f32box[0] end
local u32 = ffi.new("union { float f; uint32_t u; }")
local function bits(x) u32.f = x; return fmt("0x%08x", u32.u) end

local NF = 1000                     -- the plain model's features
local MAX_ROWS = 1000               -- property.sh renders --max-rows 1000

---------------------------------------------------------------------------
-- gen
---------------------------------------------------------------------------
if cmd == "gen" then
    local wisp = require "wisp"
    local fc = require "wisp.columns"
    local synth = require "wisp.synth"
    local seed = tonumber(arg[3]) or 1
    local rng = synth.rng(seed)
    local function pick(t) return t[rng:int(#t) + 1] end

    -- the models: plain (ids), cols (raw inputs); weights from the seed too
    local pw = {}
    for i = 1, NF do pw[i] = rng:normal() * 0.7 end
    assert(wisp.write_model(dir .. "/plain.wisp", pw, { bias = -0.2, meta = { name = "plain" } }))
    do
        local pm = assert(wisp.load(dir .. "/plain.wisp"))
        assert(pm:convert(dir .. "/plain8.wisp", "int8"))
        pm:close()
    end
    -- a bucket boundary on a float32 with an odd last mantissa bit (1.5 + 2^-23): a decimal just
    -- above the midpoint below it is that boundary when rounded straight to float32, and 1.5 when
    -- it goes through a double first (the midpoint, a tie, rounds to even)
    local B = 1.5 + 2 ^ -23
    local x = fc.numeric("x", { default = 0 })
    local spec = assert(fc.spec {
        x,
        fc.numeric("y", { normalizer = { type = "standard", mean = 2, std = 3 } }),     -- no default: missing = bad row
        fc.bucketized(x, { -2, B, 3, 1e30 }),
        fc.hash_bucket("uid", 997, { dtype = "int64" }),
        fc.hash_bucket("cat", 499),
        fc.vocabulary_list("color", { "red", "grün", "\u{1F600}" }, { num_oov_buckets = 1 }),
        fc.crossed({ "uid", "cat" }, 1009),
        fc.input("tags", "string", { sparse = true }),
        fc.hash_bucket("tags", 211),
    })
    local cw = {}
    for i = 1, spec:num_features() do cw[i] = rng:normal() * 0.8 end
    -- the bucket column's weights far apart, so one bucket more or less shows in the probability
    local off, size = spec:slice("x_bucketized")
    for k = 0, size - 1 do cw[off + k + 1] = (k - 2) * 1.3 end
    assert(wisp.write_model(dir .. "/cols.wisp", cw, { bias = 0.15, columns = spec:json(), meta = { name = "cols" } }))

    -- numbers as JSON-grammar text, the same text in every format
    local function exact(d)                        -- the exact decimal of a double, no trailing zeros
        local s = fmt("%.80e", d)
        local m, e = s:match("^(-?[%d.]+)e([-+]%d+)$")
        m = m:gsub("0+$", ""):gsub("%.$", "")
        return m .. "e" .. tonumber(e)
    end
    local function above(d) -- a decimal a hair above the double d (far below half a double's ulp)
        local s = fmt("%.80e", d)
        local m, e = s:match("^(-?[%d.]+)e([-+]%d+)$")
        return m:gsub("0+$", "") .. "1e" .. tonumber(e)
    end
    local function below(d)
        local s = fmt("%.80e", d)
        local m, e = s:match("^(-?[%d.]+)e([-+]%d+)$")
        m = m:gsub("0+$", "")
        -- d - tiny: the digits of d with its last digit lowered and 9s appended
        local head, last = m:sub(1, -2), tonumber(m:sub(-1))
        if last == nil or last == 0 then return exact(d) end
        return head .. (last - 1) .. "99999e" .. tonumber(e)
    end
    local FMAX = 3.4028234663852886e38
    local THRESH = FMAX + 2 ^ 103                  -- FLT_MAX + half an ulp: a double, rounds to inf (a tie, to even)
    local EDGE = {
        "3.4028234663852886e38", "-3.4028234663852886e38", "3.40282347e38", "3.4028235e38", below(THRESH),
        "1.17549435e-38", "1.1754942e-38", "5e-40", "1.4e-45", "1e-45", "-0", "0", "0.0", "-0.0", "1", "1e0",
        above(2 ^ -150), "7.0064923216240854e-46", "1e-46", "2.5e-45",
        above(1.5 + 2 ^ -24), above(B + 2 ^ -24), below(B + 2 ^ -24), exact(B), "1.5",
        "0.1000000000000000055511151231257827", "123456789012345678901234567890", "1E5", "2.5e+3",
        "1e39", "-1e39", below(3.4028235677973366e38), above(THRESH),
    }
    local function rnum()
        local r = rng:next()
        if r < 0.3 then return pick(EDGE) end
        if r < 0.5 then return fmt("%.9g", f32((rng:next() - 0.5) * 10)) end
        if r < 0.65 then return fmt("%.17g", (rng:next() - 0.5) * 2 ^ (rng:int(40) - 20)) end
        if r < 0.8 then -- a decimal next to the midpoint of two float32 values
            local a = f32((rng:next() + 0.5) * 2 ^ (rng:int(30) - 15))
            local ulp = 2 ^ (math.floor(math.log(a) / math.log(2)) - 23)
            return (rng:next() < 0.5 and above or below)(a + ulp / 2)
        end
        return tostring(rng:int(100) - 50)
    end

    -- plain rows: {libsvm = line or nil, json = text or nil, jbad = true when JSON-only bad}
    local plain = {}
    local IDS = { 0, NF - 1, NF, NF + 7, 4294967295, 4294967296, 4294967297, 2 ^ 31 }
    local function rid()
        if rng:next() < 0.12 then return fmt("%d", pick(IDS)) end
        return tostring(rng:int(NF))
    end
    for _ = 1, 220 do
        local kind = rng:int(4)     -- 0 valued, 1 binary, 2 mixed, 3 duplicates
        local n = rng:int(9)        -- 0 = an empty row
        local ids, vals, parts = {}, {}, { tostring(rng:int(2)) }
        for k = 1, n do
            local id = rid()
            if kind == 3 and k > 1 and rng:next() < 0.6 then id = ids[1] end
            ids[k] = id
            local valued = kind == 0 or (kind ~= 1 and rng:next() < 0.5)
            if valued then
                vals[k] = rnum(); parts[#parts + 1] = id .. ":" .. vals[k]
            else
                vals[k] = "1"; parts[#parts + 1] = id
            end
        end
        local json
        if kind == 1 then json = '{"ids": [' .. concat(ids, ", ") .. ']}'
        else json = '{"ids": [' .. concat(ids, ",") .. '], "vals": [' .. concat(vals, ",") .. ']}' end
        plain[#plain + 1] = { libsvm = concat(parts, " "), json = json }
    end
    -- bad rows with one form only
    for _, l in ipairs { "0 1:x", "1 3:0.5 abc", "0 -1:1", "0 5:nan", "0 5:inf", "0 2:1:3" } do
        plain[#plain + 1] = { libsvm = l }
    end
    for _, j in ipairs { '{"ids": {"0": 5}}', '{"ids": [1, 2], "vals": [1]}', '{"vals": [1]}', '{"ids": [1.5]}',
                         '{"ids": ["1"]}', '{"ids": [-1]}', '{"ids": [1], "vals": ["0.5"]}', '{"ids": [1], "vals": [null]}',
                         '{"ids": [3], "vals": [1e39]}', '{"ids": 3}', '7', '"row"', '{}', '{"ids": [2], "vals": [[1]]}' } do
        plain[#plain + 1] = { json = j, jbad = true }
    end

    -- cols rows: {json = one-line object text, nd_only = true for text that breaks a whole {"instances"} body}
    local cols = {}
    local STR = { "Paris", "a\\\"b", "tab\\there", "\\u00e9t\\u00e9", "été", "\\ud83d\\ude00", "\u{1F600}", "grün",
                  "gr\\u00fcn", "red", "", "back\\\\slash", "sl\\/ash", "nul\\u0000byte", "x,y]}", "\\u4e2d\\u6587" }
    local INTS = { "9007199254740992", "9007199254740993", "9007199254740994", "9223372036854775807",
                   "-9223372036854775808", "9223372036854775808", "-9223372036854775809", "18446744073709551616",
                   "0", "-1", "42", "1e3", "1.0", "2.5", "-0", "1E2", "12345678901234567" }
    local function rint()
        if rng:next() < 0.6 then return pick(INTS) end
        return tostring(rng:int(2000000) - 1000000)
    end
    for _ = 1, 200 do
        local kv = {}
        if rng:next() < 0.85 then kv[#kv + 1] = '"x": ' .. (rng:next() < 0.5 and pick(EDGE) or rnum()) end
        if rng:next() < 0.9 then kv[#kv + 1] = '"y": ' .. rnum() end
        if rng:next() < 0.85 then kv[#kv + 1] = '"uid": ' .. rint() end
        if rng:next() < 0.85 then kv[#kv + 1] = '"cat": "' .. pick(STR) .. '"' end
        if rng:next() < 0.7 then kv[#kv + 1] = '"color": "' .. pick { "red", "grün", "gr\\u00fcn", "\u{1F600}", "\\ud83d\\ude00", "blue" } .. '"' end
        if rng:next() < 0.5 then
            local t = {}
            for k = 1, rng:int(4) do t[k] = '"' .. pick(STR) .. '"' end
            kv[#kv + 1] = '"tags": [' .. concat(t, ", ") .. ']'
        end
        if rng:next() < 0.1 then kv[#kv + 1] = '"y": null' end
        -- shuffle the keys
        for i = #kv, 2, -1 do local j = rng:int(i) + 1; kv[i], kv[j] = kv[j], kv[i] end
        cols[#cols + 1] = { json = "{" .. concat(kv, ", ") .. "}" }
    end
    -- a number longer than the parsers' 511-byte token limit: 1e5 in 523 characters (refused by
    -- the libsvm parser with a reason; it must not become another number anywhere)
    local LONG = "1." .. string.rep("0", 520) .. "e5"
    plain[#plain + 1] = { libsvm = "0 1:" .. LONG, json = '{"ids": [1], "vals": [' .. LONG .. ']}' }
    cols[#cols + 1] = { json = '{"y": 1, "x": ' .. LONG .. '}' }
    for _, j in ipairs { '{"x": "abc", "y": 1}', '{"nosuch": 1, "y": 1}', '42', '{"y": 1, "uid": "12"}', '{"y": 1, "uid": 1.5}',
                         '{"y": 1, "cat": 5}', '{"y": 1, "tags": "notalist"}', '{"y": 1e39}', '{"y": [1, 2]}', '{"y": 1, "x": -1e39}',
                         '{"y": 1, "color": {"a": 1}}', '{"y": true}', '[1, 2]', '{"y": 1, "y": 2}' } do
        cols[#cols + 1] = { json = j }
    end
    for _, j in ipairs { '{"y": 3', '{"y": 1, "cat": "\255\254"}', '{"y": 01}', '{"y": 1,}' } do
        cols[#cols + 1] = { json = j, nd_only = true }
    end

    -- rows files for the references
    local pl, pj = {}, {}
    for i, r in ipairs(plain) do
        if r.libsvm then pl[#pl + 1] = r.libsvm; r.li = #pl end
    end
    writef(dir .. "/plain.libsvm", concat(pl, "\n") .. "\n")
    local cl = {}
    for i, r in ipairs(cols) do cl[#cl + 1] = r.json; r.li = #cl end
    writef(dir .. "/cols.jsonl", concat(cl, "\n") .. "\n")

    -- requests: plan.txt lines "ID MODEL ROUTE CTYPE row,row,..." (row: p<li> / pj<i> / c<li>), bodies in DIR/req/ID
    os.execute("mkdir -p " .. dir .. "/req")
    local plan, cfg, nreq = {}, {}, 0
    local function request(model, route, ctype, rows, body)
        nreq = nreq + 1
        local id = fmt("%04d", nreq)
        writef(dir .. "/req/" .. id, body)
        plan[#plan + 1] = fmt("%s %s %s %s %s", id, model, route, ctype:gsub(" ", "_"), concat(rows, ","))
        cfg[#cfg + 1] = fmt('url = "@BASE@/v1/models/%s:predict"\nmax-time = 60\nheader = "Content-Type: %s"\ndata-binary = "@%s/req/%s"\noutput = "@OUT@/%s.json"\ndump-header = "@OUT@/%s.hdr"\n',
            model, ctype, dir, id, id, id)
    end
    local function shuffled(list)
        local t = {}
        for i = 1, #list do t[i] = list[i] end
        for i = #t, 2, -1 do local j = rng:int(i) + 1; t[i], t[j] = t[j], t[i] end
        return t
    end
    local function chunks(list, size)
        local out, cur = {}, {}
        for _, v in ipairs(list) do
            cur[#cur + 1] = v
            if #cur == size then out[#out + 1] = cur; cur = {} end
        end
        if #cur > 0 then out[#out + 1] = cur end
        return out
    end
    -- plain: libsvm (every libsvm row; the good ones alone), JSON (every JSON row, with a
    -- signature_name, the good ones alone... "good" = not JSON-only bad; the CPU reference says
    -- which of the others are bad), one row a request through both
    local p_l, p_j, p_jgood = {}, {}, {}
    for i, r in ipairs(plain) do
        if r.libsvm then p_l[#p_l + 1] = i end
        if r.json then p_j[#p_j + 1] = i; if not r.jbad then p_jgood[#p_jgood + 1] = i end end
    end
    local function pkey(i, form) return (form == "l" and "pl" or "pj") .. i end
    local function plain_req(route, ctype, idx, form, size, wrap, model)
        for _, ch in ipairs(chunks(idx, size)) do
            local keys, texts = {}, {}
            for k, i in ipairs(ch) do
                keys[k] = (model == "plain8" and "q" or "") .. pkey(i, form)
                texts[k] = form == "l" and plain[i].libsvm or plain[i].json
            end
            local body
            if form == "l" then body = concat(texts, "\n") .. "\n"
            else body = (wrap or '{"instances": [%s]}'):format(concat(texts, ", ")) end
            request(model or "plain", route, ctype, keys, body)
        end
    end
    plain_req("libsvm-all", "text/plain", shuffled(p_l), "l", 120)
    plain_req("libsvm-many", "text/x-libsvm; charset=utf-8", shuffled(p_l), "l", 60)
    plain_req("json-all", "application/json", shuffled(p_j), "j", 150)
    plain_req("json-good", "application/json", shuffled(p_jgood), "j", 90)
    plain_req("json-signature", "application/json", shuffled(p_j), "j", 120,
              '{"signature_name": "serving_default", "instances": [%s], "meta": {"k": [1, 2]}}')
    local sample = shuffled(p_l)
    for k = 1, 40 do plain_req("libsvm-one", "text/x-libsvm", { sample[k] }, "l", 1) end
    sample = shuffled(p_j)
    for k = 1, 40 do plain_req("json-one", "application/json", { sample[k] }, "j", 1) end
    -- cols: JSON instances (all rows: bad ones among them send it through cjson; the good
    -- ones alone: the C parser's fast path), with signature_name, JSON lines, one row a request
    local c_all, c_inst = {}, {}
    for i, r in ipairs(cols) do
        c_all[#c_all + 1] = i
        if not r.nd_only then c_inst[#c_inst + 1] = i end
    end
    local function cols_req(route, ctype, idx, size, how)
        for _, ch in ipairs(chunks(idx, size)) do
            local keys, texts = {}, {}
            for k, i in ipairs(ch) do keys[k] = "c" .. cols[i].li; texts[k] = cols[i].json end
            local body
            if how == "nd" then body = concat(texts, "\n") .. "\n"
            elseif how == "sig" then body = '{"signature_name": "serving_default", "instances": [' .. concat(texts, ",") .. ']}'
            elseif how == "pretty" then body = '{\n  "instances" : [\n    ' .. concat(texts, " ,\n    ") .. "\n  ]\n}\n"
            else body = '{"instances": [' .. concat(texts, ",") .. ']}' end
            request("cols", route, ctype, keys, body)
        end
    end
    cols_req("json-all", "application/json", shuffled(c_inst), 250)
    cols_req("json-pretty", "application/json; charset=utf-8", shuffled(c_inst), 80, "pretty")
    cols_req("json-signature", "application/json", shuffled(c_inst), 100, "sig")
    cols_req("ndjson-all", "application/x-ndjson", shuffled(c_all), 250, "nd")
    cols_req("jsonl-many", "application/jsonl", shuffled(c_all), 50, "nd")
    sample = shuffled(c_inst)
    for k = 1, 35 do cols_req("json-one", "application/json", { sample[k] }, 1) end
    sample = shuffled(c_all)
    for k = 1, 35 do cols_req("ndjson-one", "application/x-ndjson", { sample[k] }, 1, "nd") end
    -- plain8: the plain model quantized to int8 (its own CPU reference): the scale path, on a GPU
    -- the kernel's int8 sum (issue 14 class 8), through libsvm and JSON, many rows and one
    plain_req("libsvm-all", "text/plain", shuffled(p_l), "l", 120, nil, "plain8")
    plain_req("json-all", "application/json", shuffled(p_j), "j", 150, nil, "plain8")
    sample = shuffled(p_l)
    for k = 1, 15 do plain_req("libsvm-one", "text/x-libsvm", { sample[k] }, "l", 1, nil, "plain8") end
    sample = shuffled(p_j)
    for k = 1, 15 do plain_req("json-one", "application/json", { sample[k] }, "j", 1, nil, "plain8") end
    -- which rows are "good only" sets is decided by the reference: the check also sends nothing
    -- more; the JSON-only bad rows of plain are listed for it
    local jb = {}
    for i, r in ipairs(plain) do if r.jbad then jb[#jb + 1] = "pj" .. i .. "\t" .. r.json end end
    for i, r in ipairs(plain) do
        if r.libsvm and r.json then jb[#jb + 1] = "alias\tpj" .. i .. "\tpl" .. i end
    end
    writef(dir .. "/plain_json.txt", concat(jb, "\n") .. "\n")
    local rowtext = {}
    for i, r in ipairs(plain) do
        if r.libsvm then rowtext[#rowtext + 1] = "pl" .. i .. "\t" .. r.libsvm end
        if r.json then rowtext[#rowtext + 1] = "pj" .. i .. "\t" .. r.json end
    end
    for _, r in ipairs(cols) do
        rowtext[#rowtext + 1] = "c" .. r.li .. "\t" .. r.json:gsub("[\r\n]", " ")
        rowtext[#rowtext + 1] = "ct" .. r.li .. "\t(transformed, as libsvm) " .. r.json:gsub("[\r\n]", " ")
    end
    writef(dir .. "/rows.txt", concat(rowtext, "\n") .. "\n")
    -- plain's libsvm line number of each pl row
    local lmap = {}
    for i, r in ipairs(plain) do if r.libsvm then lmap[#lmap + 1] = "pl" .. i .. "\t" .. r.li end end
    writef(dir .. "/plain_lines.txt", concat(lmap, "\n") .. "\n")
    writef(dir .. "/plan.txt", concat(plan, "\n") .. "\n")
    writef(dir .. "/curl.cfg", concat(cfg, "next\n"))
    print(fmt("property: seed %d: %d plain rows, %d cols rows, %d requests a configuration", seed, #plain, #cols, nreq))
    os.exit(0)
end

---------------------------------------------------------------------------
-- ref: the Lua API on the CPU, and the CLI's lines printed the same
---------------------------------------------------------------------------
local function fmt_prob(v)          -- engine/cli/cli.c's fmt_prob
    if v ~= v then return "nan" end
    if v >= f32(0.001) and v <= 1.0 then
        local x = math.floor(v * 1e9 + 0.5)
        if x >= 1e9 then return "1.000000000" end
        return fmt("0.%09d", x)
    end
    return fmt("%.9g", v)
end

if cmd == "ref" then
    local wisp = require "wisp"
    local fc = require "wisp.columns"
    local bad = 0
    local function emit(name, out, n)
        local t = {}
        for i = 0, n - 1 do
            local v = out[i]
            t[#t + 1] = v ~= v and "nan" or fmt("%.9g", v)
        end
        writef(dir .. "/" .. name .. ".ref", concat(t, "\n") .. "\n")
        local cli = lines_of(dir .. "/" .. name .. ".cli")
        if #cli ~= n then print(fmt("FAIL reference %s: the CLI printed %d lines for %d rows", name, #cli, n)); bad = bad + 1 end
        for i = 1, math.min(#cli, n) do
            local want = fmt_prob(out[i - 1])
            if cli[i] ~= want then
                print(fmt("FAIL reference %s line %d: the Lua API's %s prints as %s, the CLI printed %s", name, i, t[i], want, cli[i]))
                bad = bad + 1
            end
        end
    end
    local m = assert(wisp.load(dir .. "/plain.wisp"))
    local s = assert(m:session("cpu"))
    local b = assert(wisp.batch())
    local text = readf(dir .. "/plain.libsvm")
    b:parse_libsvm(text)
    local out, n = assert(s:score(b))
    emit("plain", out, n)
    local m8 = assert(wisp.load(dir .. "/plain8.wisp"))
    local s8 = assert(m8:session("cpu"))
    local out8, n8 = assert(s8:score(b))
    emit("plain8", out8, n8)
    local mc = assert(wisp.load(dir .. "/cols.wisp"))
    local sc = assert(mc:session("cpu"))
    local spec = assert(fc.from_model(mc))
    local tr = assert(spec:transformer())
    assert(tr:parse_jsonl(readf(dir .. "/cols.jsonl"), { final = true }))
    local bc = assert(tr:transform())
    local outc, nc = assert(sc:score(bc))
    emit("cols", outc, nc)
    -- the columns model's rows once more as libsvm lines of their transformed features (%.9g:
    -- exact float32): the same probabilities through text/x-libsvm; a row the transform finds
    -- bad becomes a malformed line. Requests for them are appended to the plan.
    local badrow = {}
    for _, r in ipairs(tr:bad_rows()) do badrow[r.row] = true end
    local lines = dofile("spec/nginx/csr_lines.lua")(bc)
    for r = 1, #lines do
        if badrow[r - 1] or outc[r - 1] ~= outc[r - 1] then lines[r] = "0 0:bad" end
    end
    writef(dir .. "/cols.libsvm", concat(lines, "\n") .. "\n")
    local plan, cfg = {}, {}
    local last = 0
    for l in io.lines(dir .. "/plan.txt") do last = tonumber(l:match("^(%d+)")) or last end
    local function request(route, ctype, rows)
        last = last + 1
        local id = fmt("%04d", last)
        local keys, texts = {}, {}
        for k, i in ipairs(rows) do keys[k] = "ct" .. i; texts[k] = lines[i] end
        writef(dir .. "/req/" .. id, concat(texts, "\n") .. "\n")
        plan[#plan + 1] = fmt("%s cols %s %s %s", id, route, ctype:gsub(" ", "_"), concat(keys, ","))
        cfg[#cfg + 1] = fmt('url = "@BASE@/v1/models/cols:predict"\nmax-time = 60\nheader = "Content-Type: %s"\ndata-binary = "@%s/req/%s"\noutput = "@OUT@/%s.json"\ndump-header = "@OUT@/%s.hdr"\n',
            ctype, dir, id, id, id)
    end
    local all = {}
    for i = 1, nc do all[i] = i end
    for i = 1, nc, 120 do
        local ch = {}
        for k = i, math.min(nc, i + 119) do ch[#ch + 1] = k end
        request("libsvm-transformed", "text/x-libsvm", ch)
    end
    for k = 1, 20 do request("libsvm-transformed-one", "text/plain", { 1 + (k * 37) % nc }) end
    local pf = assert(io.open(dir .. "/plan.txt", "ab")); pf:write(concat(plan, "\n"), "\n"); pf:close()
    local cf = assert(io.open(dir .. "/curl.cfg", "ab")); cf:write("next\n", concat(cfg, "next\n")); cf:close()
    if bad > 0 then os.exit(1) end
    os.exit(0)
end

---------------------------------------------------------------------------
-- check: every answer of one configuration
---------------------------------------------------------------------------
if cmd == "check" then
    local cjson = require("cjson.safe").new()
    local out, config = arg[3], arg[4]
    local ref = {}        -- row key -> float32 value or false (bad)
    local pref, cref, qref = lines_of(dir .. "/plain.ref"), lines_of(dir .. "/cols.ref"), lines_of(dir .. "/plain8.ref")
    local function val(l) if l == "nan" then return false end return f32(tonumber(l)) end
    for l in io.lines(dir .. "/plain_lines.txt") do
        local k, li = l:match("^(%S+)\t(%d+)$")
        ref[k] = val(pref[tonumber(li)])
        ref["q" .. k] = val(qref[tonumber(li)])
    end
    for i, l in ipairs(cref) do ref["c" .. i] = val(l); ref["ct" .. i] = ref["c" .. i] end
    for l in io.lines(dir .. "/plain_json.txt") do
        local a, b, c = l:match("^(%S+)\t(%S+)\t?(%S*)$")
        if a == "alias" then ref[b] = ref[c]; ref["q" .. b] = ref["q" .. c] elseif a then ref[a] = false; ref["q" .. a] = false end
    end
    local text = {}
    for l in io.lines(dir .. "/rows.txt") do
        local k, t = l:match("^(%S+)\t(.*)$")
        if k then text[k] = t; text["q" .. k] = t end
    end
    local pass, fail, shown = 0, 0, 0
    local limit = tonumber(os.getenv("WISP_PROPERTY_SHOW") or "") or 25
    local by_route, route_order = {}, {}
    local function show(s)
        shown = shown + 1
        if shown <= limit then print(s) elseif shown == limit + 1 then print("     (more failures not shown: WISP_PROPERTY_SHOW=N shows N lines)") end
    end
    for l in io.lines(dir .. "/plan.txt") do
        local id, model, route, ctype, rows = l:match("^(%S+) (%S+) (%S+) (%S+) (%S*)$")
        local keys = {}
        for k in rows:gmatch("[^,]+") do keys[#keys + 1] = k end
        local where = fmt("[%s mode, %s model, route %s, Content-Type %s, %d rows, request %s]", config, model, route, ctype:gsub("_", " "), #keys, id)
        local problems = {}
        local hdr = readf(out .. "/" .. id .. ".hdr") or ""
        local body = readf(out .. "/" .. id .. ".json")
        local status = tonumber(hdr:match("^HTTP/%S+ (%d+)"))
        local anygood = false
        for _, k in ipairs(keys) do if ref[k] then anygood = true end end
        local want_status = anygood and 200 or 400
        local doc = body and cjson.decode(body)
        if not status then problems[#problems + 1] = "no HTTP answer"
        elseif status ~= want_status then
            problems[#problems + 1] = fmt("HTTP %d, expected %d: %s", status, want_status, (body or ""):sub(1, 200))
        end
        if status and not hdr:lower():find("\ncontent%-type: application/json") then
            problems[#problems + 1] = "Content-Type is not application/json"
        end
        if status and type(doc) ~= "table" then problems[#problems + 1] = "the body is not JSON: " .. (body or ""):sub(1, 200)
        elseif status and status == want_status then
            local p = doc.predictions
            local errs = {}
            if type(doc.errors) == "table" then for _, e in ipairs(doc.errors) do if type(e) == "table" and e.index then errs[e.index] = e.error or true end end end
            if type(p) ~= "table" then problems[#problems + 1] = "no predictions list: " .. body:sub(1, 200)
            else
                if #p ~= #keys then problems[#problems + 1] = fmt("%d predictions for %d rows", #p, #keys) end
                for i, k in ipairs(keys) do
                    local v, want = p[i], ref[k]
                    local got = (type(v) == "number") and f32(v) or nil
                    if v == cjson.null and not errs[i - 1] then
                        problems[#problems + 1] = fmt("row %d (%s) is null without an errors entry", i - 1, text[k])
                    end
                    if want then
                        if got ~= want then
                            problems[#problems + 1] = fmt("row %d: %s\n       expected %.9g (%s, the CPU), got %s%s%s", i - 1, text[k], want, bits(want),
                                tostring(v), got and " (" .. bits(got) .. ")" or "", errs[i - 1] and (" error: " .. tostring(errs[i - 1])) or "")
                        end
                    elseif v ~= cjson.null or not errs[i - 1] then
                        problems[#problems + 1] = fmt("row %d: %s\n       expected null + an errors entry (the CPU reference finds it bad), got %s%s", i - 1,
                            text[k], tostring(v), errs[i - 1] and " with an error" or " without an error")
                    end
                end
                for idx in pairs(errs) do
                    if type(idx) == "number" and p[idx + 1] ~= nil and p[idx + 1] ~= cjson.null then
                        problems[#problems + 1] = fmt("errors entry for row %d, whose prediction is %s", idx, tostring(p[idx + 1]))
                    end
                end
            end
        end
        if #problems == 0 then pass = pass + 1
        else
            fail = fail + 1
            local rk = model .. "/" .. route
            if not by_route[rk] then by_route[rk] = 0; route_order[#route_order + 1] = rk end
            by_route[rk] = by_route[rk] + 1
            show(fmt("FAIL %s", where))
            for n, pr in ipairs(problems) do
                if n <= 4 then show("     " .. pr) elseif n == 5 then show(fmt("     (%d more rows wrong in this request)", #problems - 4)) end
            end
        end
    end
    if #route_order > 0 then
        local t = {}
        for _, rk in ipairs(route_order) do t[#t + 1] = rk .. " " .. by_route[rk] end
        print(fmt("     [%s] wrong requests by route: %s", config, concat(t, ", ")))
    end
    print(fmt("property[%s]: %d passed, %d failed", config, pass, fail))
    os.exit(fail == 0 and 0 or 1)
end
io.stderr:write("usage: property.lua gen DIR SEED | ref DIR | check DIR OUT CONFIG\n")
os.exit(2)
