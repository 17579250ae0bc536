-- model_spec.lua — wisp.write_model / wisp.load / model:info, weight, convert; LIBLINEAR import; malformed model files; bad arguments; closed handles.
local ffi = require "ffi"
local wisp = require "wisp"
local H = require "helpers"

local DTYPES = { "f32", "f16", "i8" }

pcall(ffi.cdef, [[
typedef struct _IO_FILE FILE;
int fileno(FILE *stream);
int ftruncate(int fd, long length);
]])

-- assert every weight of m equals the stored (quantized) reference ws
local function assert_weights(m, ws, n, dtype)
    for i = 0, n - 1 do
        local got, want = m:weight(i), ws[i]
        if dtype == "i8" then
            -- the library may round scale*q once more to float32
            assert(math.abs(got - want) <= 1e-6 * math.max(1, math.abs(want)),
                   ("weight %d: got %.9g want %.9g (i8, WISP_SEED=%d)"):format(i, got, want, H.seed))
        else
            assert(got == want, ("weight %d: got %.9g want %.9g (%s, WISP_SEED=%d)"):format(i, got, want, dtype, H.seed))
        end
    end
end

describe("models", function()
    after_each(H.cleanup)

    it("writes and loads a model, and reports its facts", function()
        local nf = 37
        local w = H.random_weights(nf)
        local path = H.tmpname(".wisp")
        assert.is_true(wisp.write_model(path, H.one_based(w, nf), {
            bias = -0.75, dtype = "f32", meta = { source = "spec", labels = "1 -1", n = 3 }, columns = "c0:hash(100)\n",
        }))
        local m = assert(wisp.load(path))
        local info = m:info()
        assert.equal(nf, info.num_features)
        assert.equal(-0.75, info.bias)
        assert.equal("f32", info.dtype)
        assert.equal(1, info.scale)
        assert.equal(path, info.path)
        assert.equal(#H.read_file(path), info.file_size)
        assert.same({ source = "spec", labels = "1 -1", n = "3" }, info.meta)
        assert.equal("c0:hash(100)\n", info.columns)
        assert.equal("spec", m:meta("source"))
        assert.is_nil(m:meta("absent"))
        assert.equal(nf, m:num_features())
        assert.equal(-0.75, m:bias())
        assert.equal("f32", m:dtype())
        assert_weights(m, H.stored_weights(w, nf, "f32"), nf, "f32")
        -- ids at and past the edge weigh 0
        assert.equal(0, m:weight(nf))
        assert.equal(0, m:weight(nf + 1))
        assert.equal(0, m:weight(2 ^ 40))
        assert.equal(0, m:weight(ffi.new("uint64_t", -1)))
        m:close()
    end)

    it("omits columns and meta when none were given", function()
        local path = H.tmpname(".wisp")
        assert.is_true(wisp.write_model(path, { 1, 2, 3 }))
        local m = assert(wisp.load(path))
        local info = m:info()
        assert.is_nil(info.columns)
        assert.same({}, info.meta)
        assert.equal(0, info.bias)
        assert.equal("f32", info.dtype)
    end)

    for _, dtype in ipairs(DTYPES) do
        it("stores weights as " .. dtype .. " (fp16 nearest-even, int8 with max|w|/127 scale)", function()
            local nf = 500 + math.random(0, 500)
            local w = H.random_weights(nf, 2)
            -- some exact edge values
            w[0], w[1], w[2] = 0, H.f32(1 / 3), H.f32(-7.25)
            local path = H.tmpname(".wisp")
            assert.is_true(wisp.write_model(path, H.one_based(w, nf), { dtype = dtype, bias = 0.5 }))
            local m = assert(wisp.load(path))
            local ws = H.stored_weights(w, nf, dtype)
            local info = m:info()
            assert.equal(dtype, info.dtype)
            if dtype == "i8" then
                assert.is_true(math.abs(info.scale - ws.scale) <= 1e-7 * ws.scale,
                               ("scale %.9g, want %.9g"):format(info.scale, ws.scale))
            else
                assert.equal(1, info.scale)
            end
            assert_weights(m, ws, nf, dtype)
            -- the file is smaller for smaller dtypes
            assert.is_true(info.file_size >= nf * ({ f32 = 4, f16 = 2, i8 = 1 })[dtype])
        end)
    end

    it("accepts dtype names and numbers", function()
        local path = H.tmpname(".wisp")
        for name, want in pairs { fp16 = "f16", half = "f16", int8 = "i8", float32 = "f32", [wisp.const.WISP_F16] = "f16" } do
            assert.is_true(wisp.write_model(path, { 1, 2 }, { dtype = name }))
            local m = assert(wisp.load(path))
            assert.equal(want, m:dtype())
            m:close()
        end
        assert.equal("i8", wisp.dtype_name("int8"))
    end)

    it("writes from an FFI float array and n", function()
        local nf = 300
        local w = H.random_weights(nf)
        local arr = ffi.new("float[?]", nf + 10)
        for i = 0, nf - 1 do arr[i] = w[i] end
        local p1, p2 = H.tmpname(".wisp"), H.tmpname(".wisp")
        assert.is_true(wisp.write_model(p1, arr, nf, { bias = 1.25, meta = "a=b\n" }))
        assert.is_true(wisp.write_model(p2, ffi.cast("const float *", arr), nf, { bias = 1.25, meta = "a=b\n" }))
        for _, p in ipairs { p1, p2 } do
            local m = assert(wisp.load(p))
            assert.equal(nf, m:num_features())
            assert.equal("b", m:meta("a"))
            assert_weights(m, H.stored_weights(w, nf, "f32"), nf, "f32")
        end
        -- identical inputs give identical files
        assert.equal(H.read_file(p1), H.read_file(p2))
    end)

    it("converts between every pair of dtypes, keeping meta and columns", function()
        local nf = 400
        local w = H.random_weights(nf, 1)
        for _, from in ipairs(DTYPES) do
            local src = H.tmpname(".wisp")
            assert(wisp.write_model(src, H.one_based(w, nf), { dtype = from, bias = 0.25, meta = { k = "v" }, columns = "cols" }))
            local m = assert(wisp.load(src))
            -- the weights as stored in `from`, as float32 (what convert reads)
            local base = {}
            for i = 0, nf - 1 do base[i] = m:weight(i) end
            for _, to in ipairs(DTYPES) do
                local dst = H.tmpname(".wisp")
                assert.is_true(m:convert(dst, to))
                local c = assert(wisp.load(dst))
                local info = c:info()
                assert.equal(to, info.dtype)
                assert.equal(0.25, info.bias)
                assert.equal("v", info.meta.k)
                assert.equal("cols", info.columns)
                assert_weights(c, H.stored_weights(base, nf, to), nf, to)
                c:close()
            end
            m:close()
        end
    end)

    it("loads with hugepages=true and gives the same weights", function()
        local nf = 1000
        local path, w = H.random_model(wisp, nf)
        local m = assert(wisp.load(path, { hugepages = true }))
        assert_weights(m, H.stored_weights(w, nf, "f32"), nf, "f32")
        local e = wisp.engine { threads = 1 }
        local m2 = assert(e:load(path, { hugepages = true }))
        assert.equal(nf, m2:num_features())
        local m3 = assert(wisp.load(path, { engine = e }))
        assert.equal(nf, m3:num_features())
    end)

    it("replaces a file atomically and leaves no temporary behind", function()
        local dir = H.tmpname()
        os.remove(dir)
        finally(function() os.execute("rm -rf " .. dir) end)
        assert(os.execute("mkdir " .. dir) == 0)
        local path = dir .. "/m.wisp"
        assert(wisp.write_model(path, { 1, 2, 3 }))
        local m = assert(wisp.load(path))
        assert(wisp.write_model(path, { 4, 5, 6, 7 }))
        -- the mapped old model is intact; the new file is the new model
        assert.equal(3, m:num_features())
        assert.equal(2, m:weight(1))
        local m2 = assert(wisp.load(path))
        assert.equal(4, m2:num_features())
        local p = io.popen("ls " .. dir)
        local listing = p:read("*a")
        p:close()
        assert.equal("m.wisp\n", listing)
        m:close(); m2:close()
    end)

    describe("LIBLINEAR import", function()
        local function liblinear_model(opts)
            local lines = {
                "solver_type " .. (opts.solver or "L2R_LR"),
                "nr_class " .. (opts.nr_class or 2),
                "label " .. (opts.labels or "1 -1"),
                "nr_feature " .. #opts.w - ((opts.bias or -1) >= 0 and 1 or 0),
                "bias " .. (opts.bias or -1),
                "w",
            }
            for _, v in ipairs(opts.w) do lines[#lines + 1] = ("%.17g "):format(v) end
            return table.concat(lines, "\n") .. "\n"
        end

        for _, case in ipairs {
            { solver = "L2R_LR", bias = 1 }, { solver = "L1R_LR", bias = -1 },
            { solver = "L2R_LR_DUAL", bias = 2.5 },
        } do
            it(("imports %s (bias %g) and scores like liblinear-predict -b 1"):format(case.solver, case.bias), function()
                local nfeat = 50
                local w = {}
                for i = 1, nfeat do w[i] = H.normal(1) end
                if case.bias >= 0 then w[nfeat + 1] = H.normal(1) end
                local src, dst = H.tmpname(".model"), H.tmpname(".wisp")
                H.write_file(src, liblinear_model { solver = case.solver, w = w, bias = case.bias })
                assert.is_true(wisp.import_liblinear(src, dst, "f16"))
                assert.equal("f16", assert(wisp.load(dst)):dtype())
                assert.is_true(wisp.import_liblinear(src, dst))   -- f32 by default
                local m = assert(wisp.load(dst))
                assert.equal(nfeat + 1, m:num_features())
                assert.equal(0, m:weight(0))
                -- libsvm text with 1-based indices, some beyond nr_feature
                local rows, text = {}, {}
                for r = 1, 60 do
                    local ids, vals, parts = {}, {}, { "+1" }
                    for k = 1, math.random(0, 12) do
                        ids[k] = math.random(1, nfeat + 5)
                        vals[k] = H.f32(H.normal(1))
                        parts[#parts + 1] = ("%d:%.9g"):format(ids[k], vals[k])
                    end
                    rows[r] = { ids = ids, vals = vals }
                    text[r] = table.concat(parts, " ")
                end
                local b = wisp.batch()
                assert.equal(60, (b:parse_libsvm(table.concat(text, "\n"))))
                local s = assert(m:session("cpu"))
                local got = s:score_table(b)
                for r, row in ipairs(rows) do
                    local dec = case.bias >= 0 and w[nfeat + 1] * case.bias or 0
                    for k, id in ipairs(row.ids) do
                        if id <= nfeat then dec = dec + H.f32(w[id]) * row.vals[k] end
                    end
                    local want = 1 / (1 + math.exp(-dec))
                    assert(math.abs(got[r] - want) < 2e-6, ("row %d: got %.9g want %.9g"):format(r, got[r], want))
                end
            end)
        end

        it("fails with nil, err on a missing file, a multi-class or SVM model, and bad numbers", function()
            local dst = H.tmpname(".wisp")
            local ok, err = wisp.import_liblinear("/nonexistent/x.model", dst)
            assert.is_nil(ok)
            assert.matches("/nonexistent/x.model", err, 1, true)
            local src = H.tmpname(".model")
            for _, bad in ipairs {
                liblinear_model { w = { 1, 2 }, solver = "L2R_L2LOSS_SVC" },
                liblinear_model { w = { 1, 2 }, nr_class = 3, labels = "1 2 3" },
                liblinear_model { w = { 1, 2 } }:gsub("\n1 \n", "\nabc \n"),
                liblinear_model { w = { 1, 2 } }:gsub("nr_feature 2", "nr_feature 5"),
                "",
            } do
                H.write_file(src, bad)
                ok, err = wisp.import_liblinear(src, dst)
                assert.is_nil(ok, bad)
                assert.is_string(err)
                assert.matches("import_liblinear: ", err, 1, true)
            end
        end)
    end)

    describe("malformed files", function()
        it("returns nil, err naming the file when it is missing", function()
            local m, err = wisp.load("/nonexistent/dir/model.wisp")
            assert.is_nil(m)
            assert.matches("/nonexistent/dir/model.wisp", err, 1, true)
        end)

        it("returns nil, err for an empty file, a directory and a text file", function()
            local p = H.tmpname()
            H.write_file(p, "")
            local m, err = wisp.load(p)
            assert.is_nil(m); assert.matches(p, err, 1, true)
            m, err = wisp.load("/tmp")
            assert.is_nil(m); assert.is_string(err)
            H.write_file(p, ("solver_type L2R_LR\n"):rep(100))
            m, err = wisp.load(p)
            assert.is_nil(m); assert.matches(p, err, 1, true)
        end)

        -- Every single-byte corruption either fails to load with a message,
        -- or (a byte the format does not use) loads the very same model.
        it("rejects or ignores every flipped byte, never loading a different model", function()
            local nf = 24
            local w = H.random_weights(nf)
            local path = H.tmpname(".wisp")
            assert(wisp.write_model(path, H.one_based(w, nf), { bias = 0.5, meta = { a = "b" }, columns = "x" }))
            local good = H.read_file(path)
            local ref = assert(wisp.load(path)):info()
            local bad = H.tmpname(".wisp")
            H.write_file(bad, good)
            local f = assert(io.open(bad, "r+b"))   -- flip in place: rewriting the file is slow here
            local rejected, accepted = 0, 0
            for pos = 1, #good do
                local byte = good:byte(pos)
                f:seek("set", pos - 1)
                f:write(string.char((byte + 1 + math.random(0, 253)) % 256))
                f:flush()
                local m, err = wisp.load(bad)
                if m then
                    accepted = accepted + 1
                    local info = m:info()
                    info.path, ref.path = nil, nil
                    assert.same(ref, info, "flipped byte " .. pos .. " loaded a different model")
                    for i = 0, nf - 1 do assert.equal(H.f32(w[i]), m:weight(i)) end
                    m:close()
                else
                    rejected = rejected + 1
                    assert.is_string(err)
                    assert.matches(bad, err, 1, true)
                end
                f:seek("set", pos - 1)
                f:write(string.char(byte))
            end
            f:close()
            assert.is_true(rejected > 0)
            -- the header, section table and all section bytes are checked
            assert.is_true(rejected >= 64 + nf * 4, ("only %d of %d flips rejected"):format(rejected, #good))
        end)

        it("rejects every truncation", function()
            local path = H.random_model(wisp, 40)
            local good = H.read_file(path)
            local bad = H.tmpname(".wisp")
            H.write_file(bad, good)
            local f = assert(io.open(bad, "r+b"))
            for len = #good - 1, 0, -1 do
                assert(ffi.C.ftruncate(ffi.C.fileno(f), len) == 0)
                local m, err = wisp.load(bad)
                assert.is_nil(m, "truncated to " .. len .. " bytes loaded")
                assert.matches(bad, err, 1, true)
            end
            f:close()
            -- and appended garbage does not go unnoticed either way: it loads the same or fails
            H.write_file(bad, good .. ("\0"):rep(100))
            local m = wisp.load(bad)
            if m then assert.equal(40, m:num_features()) end
        end)
    end)

    describe("caller mistakes raise", function()
        local path
        before_each(function() path = H.random_model(wisp, 10) end)

        local function raises(pattern, fn, ...)
            local ok, err = pcall(fn, ...)
            assert.is_false(ok, "no error, wanted " .. pattern)
            assert.matches(pattern, err, 1, true)
        end

        it("in load and write_model", function()
            raises("bad argument #1 to 'load' (string expected, got nil)", wisp.load)
            raises("bad argument #1 to 'load' (string expected, got number)", wisp.load, 5)
            raises("bad argument #2 to 'load' (table expected, got number)", wisp.load, path, 5)
            raises("bad argument #2 to 'load' (engine expected, got table)", wisp.load, path, { engine = {} })
            raises("bad argument #1 to 'write_model' (string expected, got nil)", wisp.write_model)
            raises("bad argument #2 to 'write_model' (table or float array expected, got string)", wisp.write_model, path, "w")
            raises("bad argument #2 to 'write_model' (weights[2]: number expected, got string)", wisp.write_model, path, { 1, "x" })
            raises("bad argument #2 to 'write_model' (float array expected, got double [3])", wisp.write_model, path, ffi.new("double[3]"), 3)
            raises("bad argument #3 to 'write_model' (number of weights expected, got nil)", wisp.write_model, path, ffi.new("float[3]"))
            raises("bad argument #3 to 'write_model' (n is 4 but the array holds 3 floats)", wisp.write_model, path, ffi.new("float[3]"), 4)
            raises("bad argument #3 to 'write_model' (unknown dtype 'f64' (use f32, f16 or i8))", wisp.write_model, path, { 1 }, { dtype = "f64" })
            raises("bad argument #3 to 'write_model' (dtype expected (f32, f16 or i8), got 7)", wisp.write_model, path, { 1 }, { dtype = 7 })
            raises("bad argument #3 to 'write_model' (bias: number expected, got string)", wisp.write_model, path, { 1 }, { bias = "1" })
            raises("meta key a=b", wisp.write_model, path, { 1 }, { meta = { ["a=b"] = "x" } })
            raises("meta.k: a value without newlines expected", wisp.write_model, path, { 1 }, { meta = { k = "x\ny" } })
            raises("bad argument #3 to 'write_model' (columns: string expected, got number)", wisp.write_model, path, { 1 }, { columns = 1 })
            raises("bad argument #1 to 'import_liblinear' (string expected, got nil)", wisp.import_liblinear)
            raises("bad argument #3 to 'import_liblinear' (unknown dtype 'x'", wisp.import_liblinear, "a", "b", "x")
        end)

        it("in model methods", function()
            local m = assert(wisp.load(path))
            raises("bad argument #1 to 'weight' (non-negative integer expected, got -1)", m.weight, m, -1)
            raises("bad argument #1 to 'weight' (non-negative integer expected, got 1.5)", m.weight, m, 1.5)
            raises("bad argument #1 to 'weight' (integer expected, got string)", m.weight, m, "1")
            raises("bad argument #1 to 'meta' (string expected, got nil)", m.meta, m)
            raises("bad argument #1 to 'convert' (string expected, got nil)", m.convert, m)
            raises("bad argument #2 to 'convert' (unknown dtype 'bf16'", m.convert, m, path .. "2", "bf16")
            raises("bad argument #1 to 'session' (string expected, got number)", m.session, m, 1)
            raises("calling 'info' on bad self (model expected, got table)", m.info, {})
            raises("calling 'info' on bad self (model expected, got nil)", m.info)
            raises("bad argument #1 to 'session' (model expected, got nil)", wisp.session)
        end)

        it("point at the caller's line", function()
            local ok, err = pcall(function() wisp.load(nil) end)
            assert.is_false(ok)
            assert.matches("model_spec.lua:%d+: bad argument #1 to 'load'", err)
            local m = assert(wisp.load(path))
            ok, err = pcall(function() m:weight(-5) end)
            assert.matches("model_spec.lua:%d+: bad argument #1 to 'weight'", err)
        end)

        it("when a closed model is used", function()
            local m = assert(wisp.load(path))
            m:close()
            assert.is_true(m:is_closed())
            m:close()   -- closing twice is harmless
            for _, name in ipairs { "info", "weight", "num_features", "bias", "dtype", "convert", "session" } do
                local ok, err = pcall(m[name], m, 0)
                assert.is_false(ok)
                assert.matches("calling '" .. name .. "' on a closed model", err, 1, true)
            end
            raises("bad argument #1 to 'session' (model is closed)", wisp.session, m)
        end)
    end)

    it("runtime failures of write_model and convert return nil, err", function()
        local ok, err = wisp.write_model("/nonexistent/dir/m.wisp", { 1, 2 })
        assert.is_nil(ok)
        assert.matches("write_model: ", err, 1, true)
        assert.matches("/nonexistent/dir", err, 1, true)
        local m = assert(wisp.load((H.random_model(wisp, 5))))
        ok, err = m:convert("/nonexistent/dir/c.wisp", "f16")
        assert.is_nil(ok)
        assert.matches("convert: ", err, 1, true)
    end)

    it("frees models by gc, and a session keeps its model alive", function()
        local path, w, bias = H.random_model(wisp, 64)
        local function mappings()
            local n = 0
            for line in io.lines("/proc/self/maps") do
                if line:find(path, 1, true) then n = n + 1 end
            end
            return n
        end
        local function vm_kb()
            for line in io.lines("/proc/self/status") do
                local kb = line:match("^VmSize:%s+(%d+)")
                if kb then return tonumber(kb) end
            end
        end
        collectgarbage(); collectgarbage()
        local vm0 = vm_kb()
        for _ = 1, 2000 do
            local m = assert(wisp.load(path))
            assert.equal(64, m:num_features())
        end
        collectgarbage(); collectgarbage()
        -- every collected model unmapped its private copy (each holds 8 KiB: 2000 leaked would be 16 MB)
        assert.is_true(vm_kb() - vm0 < 4096, "address space grew by " .. (vm_kb() - vm0) .. " KiB")
        -- a loaded model never maps its file (it serves a private copy of the verified bytes)
        local kept = assert(wisp.load(path))
        assert.equal(0, mappings())
        kept:close()
        assert.is_true(kept:is_closed())
        local s = assert(assert(wisp.load(path)):session("cpu"))
        collectgarbage(); collectgarbage()
        local b = wisp.batch_from_rows { { 0, 1 } }
        local p = s:score_table(b)
        assert.is_true(math.abs(p[1] - H.sigmoid(bias + H.f32(w[0]) + H.f32(w[1]))) < 1e-6)
    end)
end)
