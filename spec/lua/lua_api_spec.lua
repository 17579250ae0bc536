-- lua_api_spec.lua — the Lua layer's one API (issue 19): wisp.base's shared helpers, the hot-path methods the service uses, the glossary's names and their deprecated aliases, the submit queue as the C ring's mirror.
local wisp = require "wisp"
local fc = require "wisp.columns"
local base = require "wisp.base"
local ffi = require "ffi"
local H = require "helpers"

local desc = assert(fc.description {
    fc.input("age", "float32", { default = 30 }),
    fc.numeric("age"),
    fc.hash_bucket("city", 100),
})

local function model()
    local path = H.tmpname(".wisp")
    local w = {}
    for i = 1, desc:num_features() do w[i] = ((i * 37) % 11 - 5) * 0.1 end
    assert(wisp.write_model(path, w, { bias = 0.25, columns = desc:json() }))
    return assert(wisp.load(path))
end

describe("the Lua layer's modules", function()
    it("every object module shares wisp.base and fills the one wisp table", function()
        for _, name in ipairs { "engine", "model", "batch", "raw", "session", "vw" } do
            local mod = require("wisp." .. name)
            assert.is_table(mod)
        end
        assert.equal(base.wisp, wisp)
        assert.equal(require("wisp.raw").RawBatch, fc.RawBatch)
        assert.equal(require("wisp.session").Session, wisp.Session)
    end)

    it("one error formatter: base.errmsg / last_error give wisp_errmsg, else the status text", function()
        local _, err = wisp.load("/nonexistent/dir/m.wisp")
        assert.is_string(err)
        assert.equal(err, base.errmsg(-3))                       -- the message of that failure
        assert.equal("ctx: " .. err, base.last_error(-3, "ctx"))
        assert.equal(wisp.errmsg(), ffi.string(base.C.wisp_errmsg()))
    end)

    it("typename says the glossary's words in messages", function()
        local r = assert(desc:raw_batch())
        assert.equal("raw batch", base.typename(r))
        assert.equal("batch", base.typename(assert(wisp.batch())))
        assert.has_error(function() wisp.session(r) end, "bad argument #1 to 'session' (model expected, got raw batch)")
    end)
end)

describe("the glossary's names", function()
    it("wisp.batch_wrap wraps FFI arrays; batch_from_ffi is its alias, messages in the name called", function()
        local rp, ids = ffi.new("uint32_t[3]", { 0, 1, 2 }), ffi.new("uint32_t[2]", { 3, 4 })
        local b = assert(wisp.batch_wrap(2, rp, ids))
        assert.equal(2, b:rows())
        assert.is_true(b:is_wrapped())
        assert.equal(2, assert(wisp.batch_from_ffi(2, rp, ids)):rows())
        assert.equal(2, assert(wisp.default_engine():batch_wrap(2, rp, ids)):rows())
        assert.has_error(function() wisp.batch_wrap(-1, rp, ids) end,
                         "bad argument #1 to 'batch_wrap' (rows: non-negative integer expected, got -1)")
        assert.has_error(function() wisp.batch_from_ffi(-1, rp, ids) end,
                         "bad argument #1 to 'batch_from_ffi' (rows: non-negative integer expected, got -1)")
    end)

    it("fc.description and desc:raw_batch; fc.spec and desc:transformer stay as aliases", function()
        local d2 = assert(fc.spec { fc.hash_bucket("city", 100) })
        assert.equal(getmetatable(desc), getmetatable(d2))
        assert.equal(fc.Description, fc.Spec)
        local r1, r2 = assert(desc:raw_batch()), assert(desc:transformer())
        assert.equal(fc.RawBatch, getmetatable(r1))
        assert.equal(fc.Transformer, getmetatable(r2))
        assert.has_error(function() fc.description {} end, "bad argument #1 to 'description' (no columns)")
        assert.has_error(function() fc.spec {} end, "bad argument #1 to 'spec' (no columns)")
        assert.has_error(function() fc.description({ fc.numeric("x") }, 5) end,
                         "bad argument #2 to 'description' (options table expected)")
        r1:close()
        assert.is_true(r1:is_closed())
        assert.has_error(function() r1:rows() end, "calling 'rows' on a closed raw batch")
    end)

    it("a description read back is decoded once, by C: columns and inputs from its accessors", function()
        local back = assert(fc.parse(desc:json()))
        assert.same(desc:slices(), back.columns)
        assert.same(desc:input_list(), back.inputs)
        assert.is_nil(fc.json_decode)                            -- no second JSON decoder in Lua
        local m = model()
        local fm = assert(fc.from_model(m))
        assert.same(desc:slices(), fm.columns)
        assert.equal(2, wisp.placement.row_width(m, {}))         -- its columns, counted by C
    end)
end)

describe("the device grammar", function()
    it("is parsed once, in C: wisp.device_parse, placement.is_device and sessions agree", function()
        local good = { cpu = { "cpu", 0 }, gpu = { "gpu", 0 }, ["gpu:3"] = { "gpu", 3 }, gpus = { "gpus", 0 },
                       ["gpus:2"] = { "gpus", 2 }, auto = { "auto", 0 }, ["gpu:15"] = { "gpu", 15 } }
        for name, want in pairs(good) do
            assert.same(want, { wisp.device_parse(name) }, name)
            assert.is_true(wisp.placement.is_device(name), name)
        end
        local m = model()
        for _, name in ipairs { "", "gpus:", "gpus:0", "gpus:x", "gpu:-1", "gpu:16", "GPU", "tpu:0", ("g"):rep(40) } do
            local kind, err = wisp.device_parse(name)
            assert.is_nil(kind, name)
            local ok, why = wisp.placement.is_device(name)
            assert.is_false(ok, name)
            assert.equal(err, why)
            local s, serr = m:session(name)                       -- the same words from a session
            assert.is_nil(s, name)
            assert.equal("session: " .. err, serr)
        end
        assert.has_error(function() wisp.device_parse(3) end, "bad argument #1 to 'device_parse' (string expected, got number)")
    end)
end)

describe("the service's hot-path methods", function()
    local m = model()

    it("batch:parse_libsvm_buf takes a pointer and a length, positional", function()
        local b = assert(wisp.batch())
        local text = "1 0:1 2:0.5\n0 1:1\n1 3:1"
        local buf = ffi.new("char[?]", #text + 1, text)
        local rows, used, line = b:parse_libsvm_buf(buf, #text, 0)
        assert.same({ 3, #text, 3 }, { rows, used, line })
        rows, used, line = b:parse_libsvm_buf(text, #text, 2, false, 10)   -- max_rows 2, line 10
        assert.same({ 2, 18, 12 }, { rows, used, line })
        assert.equal(5, b:rows())
        assert.same({ 1, 6, 2^40 + 1 }, { b:parse_libsvm_buf("1 0:1\n", 6, 0, true, 2^40) })
        local w = assert(wisp.batch_wrap(1, ffi.new("uint32_t[2]", { 0, 1 }), ffi.new("uint32_t[1]", { 1 })))
        assert.has_error(function() w:parse_libsvm_buf(text, #text, 0) end,
                         "calling 'parse_libsvm_buf' on a zero-copy batch (it cannot grow)")
    end)

    it("raw:parse_jsonl_buf, raw:bad_count and session:bad_rows after score_raw", function()
        local r = assert(desc:raw_batch())
        local text = '{"age": 20, "city": "Oslo"}\n{"age": "old", "city": "Rome"}\n{"city": "Paris"}\n'
        local buf = ffi.new("char[?]", #text + 1, text)
        local used, line = r:parse_jsonl_buf(buf, #text, 0)
        assert.same({ #text, 3 }, { used, line })
        assert.equal(3, r:rows())
        assert.equal(1, r:bad_count())
        assert.equal(1, #r:bad_rows())
        local s = assert(m:session("cpu"))
        local out = assert(s:score_raw(r))
        assert.is_true(out[1] ~= out[1])                         -- the bad row scores NaN
        assert.equal(1, s:bad_count())
        local bad = s:bad_rows()
        assert.equal(1, bad[1].row)
        assert.same(r:bad_rows(), bad)
        assert.same({ 1, 4 }, { r:parse_jsonl_buf("{", 1, 0, true, 3) })   -- an unfinished record: a bad row
        assert.equal(2, r:bad_count())
    end)

    it("session:set_profiling and session:last_stat(i) with wisp.stat_index", function()
        local s = assert(m:session("cpu"))
        local b = assert(wisp.batch_from_rows { { 0, 1 }, { 2 } })
        assert.is_false(s:profiling())
        s:set_profiling(true)
        assert.is_true(s:profiling())
        assert(s:score(b))
        local i = wisp.stat_index.rows
        assert.equal("rows", wisp.stat_names[i])
        assert.equal(2, s:last_stat(i))
        assert.equal(2, s:last_stats().rows)
        s:set_profiling(false)
        assert.equal(0, s:last_stat(i))
        assert.is_nil(s:last_stats())
    end)

    it("allocate nothing per request once compiled: parse, score, score_raw, stats, submit/wait", function()
        local jit = require "jit"
        if not jit.status() then return pending("the JIT is off") end
        local s = assert(m:session("cpu"))
        s:set_profiling(true)
        local b, r = assert(wisp.batch()), assert(desc:raw_batch())
        local out, out2 = ffi.new("float[?]", 64), ffi.new("float[?]", 64)
        local text = "1 0:1 2:0.5\n0 1:1\n1 3:1\n"
        local buf = ffi.new("char[?]", #text + 1, text)
        local jt = '{"age": 20, "city": "Oslo"}\n{"city": "Rome"}\n'
        local jb = ffi.new("char[?]", #jt + 1, jt)
        local i_rows = wisp.stat_index.rows
        local function request()
            b:clear()
            b:parse_libsvm_buf(buf, #text, 0)
            assert(s:score(b, out))
            local x = s:last_stat(i_rows) + b:bad_count() + b:rows()
            r:clear()
            r:parse_jsonl_buf(jb, #jt, 0)
            assert(s:score_raw(r, out2))
            x = x + r:bad_count() + s:bad_count() + r:rows() + s:last_stat(i_rows)
            assert(s:submit(b, out))
            if s:wait() ~= b then error("the queue lost its order") end
            return x
        end
        for _ = 1, 3000 do request() end                         -- compiled by now
        collectgarbage()
        collectgarbage("stop")
        local before, sum = collectgarbage("count"), 0
        for _ = 1, 10000 do sum = sum + request() end
        local per = (collectgarbage("count") - before) * 1024 / 10000
        collectgarbage("restart")
        assert.equal(10000 * 10, sum)                            -- 3 + 0 + 3 rows, 0 + 0 + 2 + 2 rows
        -- measured 3 to 25 bytes a request (trace exits, varying from run to run under
        -- busted); one Lua table a call (the old submit queue's {batch, out}) is ~90 bytes
        assert.is_true(per < 64, ("%.1f bytes allocated per request"):format(per))
    end)

    it("wisp.clock_ns and wisp.clock are one monotonic clock", function()
        local a = wisp.clock_ns()
        local c = wisp.clock()
        local z = wisp.clock_ns()
        assert.is_number(a)
        assert.is_true(z >= a)
        assert.is_true(math.abs(c - a * 1e-9) < 1)
    end)
end)

describe("the submit queue", function()
    local m = model()

    it("is the C ring's mirror: wait returns the batch C completed, in submit order, across the ring's wrap", function()
        local s = assert(m:session("cpu"))
        local seen = 0
        for round = 1, 3 do
            local bs, outs = {}, {}
            for k = 1, 50 do                                     -- 150 submits: the 64-slot ring wraps
                bs[k] = assert(wisp.batch_from_rows { { k % 7 } })
                outs[k] = ffi.new("float[1]")
                assert(s:submit(bs[k], outs[k]))
                assert.equal(k, s:pending())
            end
            for k = 1, 50 do
                local b, out = s:wait()
                assert.equal(bs[k], b)
                assert.equal(outs[k], out)
                seen = seen + 1
            end
            assert.equal(0, s:pending())
            local none, err = s:wait()
            assert.is_nil(none)
            assert.equal("wait: nothing was submitted", err)
            assert.equal(round * 50, seen)
        end
        -- a submit beyond WISP_MAX_PENDING is refused and leaves the queue as it was
        local keep = {}
        for k = 1, wisp.const.WISP_MAX_PENDING do
            keep[k] = assert(wisp.batch_from_rows { { 1 } })
            assert(s:submit(keep[k], ffi.new("float[1]")))
        end
        local extra = assert(wisp.batch_from_rows { { 1 } })
        local ok, err = s:submit(extra, ffi.new("float[1]"))
        assert.is_nil(ok)
        assert.matches("^submit: ", err)
        assert.equal(wisp.const.WISP_MAX_PENDING, s:pending())
        assert.equal(keep[1], (s:wait()))
        s:close()                                                -- lands the rest
        for k = 2, #keep do keep[k]:clear() end                  -- theirs again: no longer in flight
    end)

    it("a process that exits with batches in flight frees them and its engines (no crash at unload)", function()
        -- before: the session's finalizer re-attached the batches' finalizers, which
        -- lua_close never runs; the leaked batches kept their engines' pool threads
        -- alive while the library was unloaded: a crash in about 1 exit of 13
        local path = H.random_model(wisp, 100)
        local code = ([[
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local wisp, ffi = require "wisp", require "ffi"
KEEP = {}
for k = 1, 20 do
    local e = wisp.engine { threads = 2 }
    local s = assert(assert(e:load(%q)):session("cpu"))
    for j = 1, 3 do
        local b, o = assert(e:batch_from_rows { { 1, 2 }, { 3 } }), ffi.new("float[2]")
        assert(s:submit(b, o))
        KEEP[#KEEP + 1] = { b, o }
    end
    if k %% 2 == 0 then KEEP[#KEEP + 1] = s end
end
]]):format(path)
        for run = 1, 20 do
            local out, ok = H.luajit(code, "WISP_LIB=" .. os.getenv("WISP_LIB"))
            assert.is_true(ok, ("run %d: %s"):format(run, out))
        end
    end)
end)
