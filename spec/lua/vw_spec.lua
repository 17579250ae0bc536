-- vw_spec.lua — Vowpal Wabbit from Lua: VW's hashes against a Lua reference and VW's golden vectors, parse_vw, import_vw, and the CLI's `import vw` / `score --format vw`.
local H = require "helpers"
local wisp = require "wisp"
local bit = require "bit"

local build = os.getenv("WISP_BUILD") or "build"
local band, bor, bxor, lshift, rshift, tobit = bit.band, bit.bor, bit.bxor, bit.lshift, bit.rshift, bit.tobit

-- a Lua reference of MurmurHash3_x86_32 (unsigned results)
local function u32(x) return x % 4294967296 end
local function mul32(a, b)           -- (a * b) mod 2^32 without losing bits in doubles
    local al, ah = a % 65536, math.floor(a / 65536) % 65536
    return u32(al * b + u32(ah * b % 65536 * 65536))
end
local function rotl(x, r) return u32(bor(lshift(tobit(x), r), rshift(tobit(x), 32 - r))) end
local function murmur3(s, seed)
    local h, n = seed, #s
    local c1, c2 = 0xcc9e2d51, 0x1b873593
    local nb = math.floor(n / 4)
    for i = 0, nb - 1 do
        local b1, b2, b3, b4 = s:byte(4 * i + 1, 4 * i + 4)
        local k = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
        k = mul32(k, c1); k = rotl(k, 15); k = mul32(k, c2)
        h = u32(bxor(tobit(h), tobit(k))); h = rotl(h, 13); h = u32(mul32(h, 5) + 0xe6546b64)
    end
    local k, t = 0, n % 4
    if t > 0 then
        local base = 4 * nb
        if t >= 3 then k = u32(bxor(k, lshift(s:byte(base + 3), 16))) end
        if t >= 2 then k = u32(bxor(k, lshift(s:byte(base + 2), 8))) end
        k = u32(bxor(k, s:byte(base + 1)))
        k = mul32(k, c1); k = rotl(k, 15); k = mul32(k, c2)
        h = u32(bxor(tobit(h), tobit(k)))
    end
    h = u32(bxor(tobit(h), n))
    h = u32(bxor(tobit(h), rshift(tobit(h), 16))); h = mul32(h, 0x85ebca6b)
    h = u32(bxor(tobit(h), rshift(tobit(h), 13))); h = mul32(h, 0xc2b2ae35)
    h = u32(bxor(tobit(h), rshift(tobit(h), 16)))
    return h
end
local function hashstring(s, seed)
    s = s:match("^[%z\1- ]*(.-)[%z\1- ]*$")
    if s:match("^%d*$") then
        local v = 0
        for i = 1, #s do v = (v * 10 + s:byte(i) - 48) % 4294967296 end
        return u32(v + seed)
    end
    return murmur3(s, seed)
end

local sh = H.sh

local function readable_model(bits, options, weights)
    local t = { "Version 9.11.9", "Id ", "Min label:-50", "Max label:50", "bits:" .. bits, "lda:0", "0 ngram:",
                "0 skip:", "options:" .. options, "Checksum: 1", ":1", "initial_t 0", "t 5" }
    local idx = {}
    for i in pairs(weights) do idx[#idx + 1] = i end
    table.sort(idx)
    for _, i in ipairs(idx) do t[#t + 1] = ("%d:%.9g 1 1"):format(i, weights[i]) end
    return table.concat(t, "\n") .. "\n"
end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

describe("Vowpal Wabbit", function()
    after_each(H.cleanup)

    it("hashes as a Lua MurmurHash3 reference and VW's golden vectors do", function()
        for _ = 1, 300 do
            local n = math.random(0, 40)
            local b = {}
            for i = 1, n do b[i] = string.char(math.random(0, 255)) end
            local s, seed = table.concat(b), math.random(0, 2^32 - 1)
            assert.equal(murmur3(s, seed), wisp.vw_murmur3(s, seed))
            assert.equal(hashstring(s, seed), wisp.vw_hashstring(s, seed))
        end
        assert.equal(1009084850, wisp.vw_murmur3("a"))            -- VW's hash_space("a")
        assert.equal(1009084850 + 123, wisp.vw_hashstring("0123", 1009084850))
        assert.equal(wisp.vw_murmur3("-7", 5), wisp.vw_hashstring("-7", 5))
        -- a sample of spec/data/vw_golden.json (made by VW itself; test_vw.c checks all of it)
        local f = io.open((os.getenv("WISP_SPEC_DATA") or "spec/data") .. "/vw_golden.json")
        assert.is_not_nil(f)
        local n = 0
        for line in f:lines() do
            local hex, seed, hash = line:match('^{"hex": "(%x*)", "seed": (%d+), "hash": (%d+)}')
            if hex and n < 200 then
                local s = hex:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end)
                local mm = murmur3(s, tonumber(seed))
                -- the murmur3 section first, then hashstring: each value is one of the two
                assert.is_true(tonumber(hash) == mm or tonumber(hash) == hashstring(s, tonumber(seed)))
                n = n + 1
            end
        end
        f:close()
        assert.is_true(n >= 200)
    end)

    it("parses VW text into VW's indices and scores sigmoid(VW's sum) of an imported model", function()
        local bits = 12
        local mask = 2^bits
        local vw = assert(wisp.vw("-b 12 -q ab --hash_seed 3"))
        assert.equal("-b 12 -q ab --hash_seed 3", vw:options())
        assert.equal(12, vw:bits())
        local seed = 3
        local ha, hb = hashstring("a", seed), hashstring("b", seed)
        assert.equal(ha, vw:hash_namespace("a"))
        assert.equal(murmur3("", seed), vw:hash_namespace(" "))
        -- random weights, a model, random lines
        local w = {}
        for i = 0, mask - 1 do if math.random() < 0.7 then w[i] = H.f32(H.normal(0.5)) end end
        local src, dst = H.tmpname(".txt"), H.tmpname(".wisp")
        H.write_file(src, readable_model(bits, " --link logistic --quadratic ab --hash_seed 3", w))
        assert.is_true(wisp.import_vw(src, dst))
        local m = assert(wisp.load(dst))
        assert.equal("vw", m:meta("source"))
        assert.equal("logistic", m:meta("vw_loss"))
        assert.equal(0, m:bias())
        local mvw = assert(m:vw())
        assert.equal(vw:options(), mvw:options())
        local lines, want = {}, {}
        for r = 1, 200 do
            local fa, fb, parts = {}, {}, { r % 2 == 0 and "1" or "-1" }
            local sum = w[11650396 % mask] or 0
            parts[#parts + 1] = "|a"
            for k = 1, math.random(0, 6) do
                local name = (math.random() < 0.3) and tostring(math.random(0, 99999)) or ("f" .. math.random(1, 500))
                local v = H.f32(math.random(-300, 300) / 64)
                if v ~= 0 then
                    fa[#fa + 1] = { hashstring(name, ha), v }
                    parts[#parts + 1] = ("%s:%.9g"):format(name, v)
                end
            end
            parts[#parts + 1] = "|b"
            for k = 1, math.random(0, 4) do
                local name = "c" .. math.random(1, 100)
                fb[#fb + 1] = { hashstring(name, hb), 1 }
                parts[#parts + 1] = name
            end
            for _, f in ipairs(fa) do sum = sum + (w[f[1] % mask] or 0) * f[2] end
            for _, f in ipairs(fb) do sum = sum + (w[f[1] % mask] or 0) end
            for _, f1 in ipairs(fa) do
                for _, f2 in ipairs(fb) do
                    local q = vw:hash_quadratic(f1[1], f2[1])
                    assert.equal(u32(bxor(tobit(mul32(16777619, f1[1])), tobit(f2[1]))) % mask, q)
                    sum = sum + (w[q] or 0) * H.f32(f1[2] * f2[2])
                end
            end
            lines[r] = table.concat(parts, " ")
            want[r] = sigmoid(sum)
        end
        lines[#lines + 1] = "1 |a x:1:2"                      -- malformed: a bad row
        local b = wisp.batch()
        local n, used, line = b:parse_vw(mvw, table.concat(lines, "\n") .. "\n")
        assert.equal(201, n)
        assert.equal(201, line)
        assert.is_true(used > 0)
        local s = assert(wisp.session(m, "cpu"))
        local p = assert(s:score(b))
        for r = 1, 200 do
            assert.is_true(math.abs(p[r - 1] - want[r]) <= 1e-6, ("row %d: wisp %.9g, reference %.9g"):format(r, p[r - 1], want[r]))
        end
        assert.is_true(p[200] ~= p[200])                     -- NaN
        local bad = b:bad_rows()
        assert.equal(1, #bad)
        assert.equal(200, bad[1].row)
        assert.equal(201, bad[1].line)
        assert.matches("bad value '1:2'", bad[1].msg, 1, true)
        s:close(); m:close(); vw:close(); mvw:close()
        assert.is_true(vw:is_closed())
    end)

    it("streams: chunks with final=false give the rows of one call", function()
        local vw = assert(wisp.vw("-b 10 -q aa"))
        local text = {}
        for r = 1, 100 do text[r] = ("1 |a x%d y%d:%d |b z"):format(r, r % 7, r % 5) end
        text = table.concat(text, "\n")
        local whole = wisp.batch()
        assert.equal(100, (whole:parse_vw(vw, text)))
        local part, pos, line = wisp.batch(), 1, 0
        while pos <= #text do
            local chunk = text:sub(pos, math.min(#text, pos + math.random(1, 60)))
            local final = pos + #chunk > #text
            local n, used, ln = part:parse_vw(vw, chunk, { final = final, line = line, max_rows = 3 })
            assert.is_number(n)
            pos, line = pos + used, ln
            if used == 0 and final then break end
        end
        assert.equal(100, line)
        assert.equal(whole:rows(), part:rows())
        assert.equal(whole:nnz(), part:nnz())
    end)

    it("refuses what it does not support, with nil, err", function()
        local vw, err = wisp.vw("--cubic abc")
        assert.is_nil(vw)
        assert.matches("'--cubic' is not supported", err, 1, true)
        vw, err = wisp.vw("-q ::")
        assert.is_nil(vw)
        assert.matches("wildcard", err, 1, true)
        local src, dst = H.tmpname(".txt"), H.tmpname(".wisp")
        H.write_file(src, readable_model(8, " --oaa 3", { [1] = 0.5 }))
        local ok
        ok, err = wisp.import_vw(src, dst)
        assert.is_nil(ok)
        assert.matches("import_vw: " .. src .. ":9: option '--oaa' is not supported", err, 1, true)
        local m = assert(wisp.write_model(dst, { 1, 2 }) and wisp.load(dst))
        vw, err = m:vw()
        assert.is_nil(vw)
        assert.matches("not a Vowpal Wabbit model", err, 1, true)
        assert.has_error(function() wisp.batch():parse_vw("-b 18", "1 |a x") end,
                         "bad argument #1 to 'parse_vw' (vw options (wisp.vw or model:vw()) expected, got string)")
        assert.has_error(function() wisp.vw(18) end, "bad argument #1 to 'vw' (string expected, got number)")
    end)

    it("works from the command line: wisp import vw, wisp score --format vw", function()
        local src, dst, data = H.tmpname(".txt"), H.tmpname(".wisp"), H.tmpname(".vw")
        local w = { [11650396 % 1024] = 0.25 }
        local hx = hashstring("x", hashstring("a", 0)) % 1024
        w[hx] = 1.5
        H.write_file(src, readable_model(10, " --link logistic --noconstant", w))
        local out, rc = sh(("%s/wisp import vw %s %s"):format(build, src, dst))
        assert.equal(0, rc, out)
        assert.matches("VW options: -b 10 --noconstant", out, 1, true)
        H.write_file(data, "1 |a x\n\n-1 |a x:2 y\n1 |a x:3abc\n")
        out, rc = sh(("%s/wisp score --format vw -d cpu -m %s %s"):format(build, dst, data))
        assert.equal(1, rc, out)                                   -- one malformed line
        local probs = {}
        for l in out:gmatch("[^\n]+") do if l:match("^[%d.na]+$") then probs[#probs + 1] = l end end
        assert.equal(3, #probs, out)
        assert.is_true(math.abs(tonumber(probs[1]) - sigmoid(1.5)) < 1e-6)   -- --noconstant: no 0.25
        assert.is_true(math.abs(tonumber(probs[2]) - sigmoid(3.0)) < 1e-6)
        assert.equal("nan", probs[3])
        assert.matches(data .. ":4: bad value '3abc'", out, 1, true)
        -- a libsvm model scored with --format vw: a clear error
        local lib = H.tmpname(".wisp")
        assert(wisp.write_model(lib, { 1, 2 }))
        out, rc = sh(("%s/wisp score --format vw -m %s %s"):format(build, lib, data))
        assert.equal(1, rc)
        assert.matches("not a Vowpal Wabbit model", out, 1, true)
        out, rc = sh(("%s/wisp import vw --help"):format(build))
        assert.equal(0, rc)
        assert.matches("--readable_model", out, 1, true)
        -- a squared-loss model imports with a warning
        H.write_file(src, (readable_model(10, "", w):gsub("Min label:%-50", "Min label:0"):gsub("Max label:50", "Max label:1")))
        out, rc = sh(("%s/wisp import vw %s %s"):format(build, src, dst))
        assert.equal(0, rc, out)
        assert.matches("does not look trained with --loss_function logistic", out, 1, true)
    end)
end)
