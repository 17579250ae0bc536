-- score_spec.lua — sessions: scores against a float64 Lua reference (every dtype, uniform and Zipf ids, every batch source), output arrays, statistics, devices, thread-count invariance, JIT-compiled scoring loop.
local ffi = require "ffi"
local wisp = require "wisp"
local H = require "helpers"

local TOL = 1e-6       -- CPU: sums in double, one float rounding of p
local GPU_TOL = 1e-5   -- GPU against the CPU

local function raises(pattern, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "no error, wanted " .. pattern)
    assert.matches(pattern, err, 1, true)
end

-- the usable GPUs, unless WISP_TEST_GPU=0
local function gpus()
    if os.getenv("WISP_TEST_GPU") == "0" then return {} end
    local list = {}
    for _, d in ipairs(wisp.devices()) do
        if d.kind == "gpu" and d.usable then list[#list + 1] = d.name end
    end
    return list
end

-- The same rows as a zero-copy FFI batch (uint32 ids, ids >= 2^32 as 0xFFFFFFFF);
-- returns the batch (it keeps the arrays alive).
local function ffi_batch(rows, mode)
    local n, nnz, nv = #rows, 0, 0
    for _, row in ipairs(rows) do
        nnz = nnz + #row.ids + #(row.bids or {})
        nv = nv + (row.vals and #row.vals or 0)
    end
    local indptr = ffi.new("uint32_t[?]", n + 1)
    local val_ptr = ffi.new("uint32_t[?]", n + 1)
    local ids = ffi.new("uint32_t[?]", math.max(nnz, 1))
    local vals = ffi.new("float[?]", math.max(mode == "all" and nnz or nv, 1))
    local k, v = 0, 0
    for r, row in ipairs(rows) do
        for i, id in ipairs(row.ids) do
            ids[k] = id >= 2 ^ 32 and 0xFFFFFFFF or id
            if mode == "all" then vals[k] = row.vals and row.vals[i] or 1 end
            k = k + 1
        end
        if row.vals and mode == "mixed" then
            for _, x in ipairs(row.vals) do vals[v] = x; v = v + 1 end
        end
        for _, id in ipairs(row.bids or {}) do
            ids[k] = id >= 2 ^ 32 and 0xFFFFFFFF or id
            if mode == "all" then vals[k] = 1 end
            k = k + 1
        end
        indptr[r] = k
        val_ptr[r] = v
    end
    if mode == "mixed" then
        return assert(wisp.batch_from_ffi(n, indptr, ids, val_ptr, vals))
    elseif mode == "all" then
        return assert(wisp.batch_from_ffi(n, indptr, ids, nil, vals))
    end
    return assert(wisp.batch_from_ffi(n, indptr, ids))
end

describe("sessions", function()
    after_each(H.cleanup)

    for _, dtype in ipairs { "f32", "f16", "i8" } do
        for _, kind in ipairs { "uniform", "zipf" } do
            it(("score like the float64 reference: %s weights, %s ids, every batch source"):format(dtype, kind), function()
                local nf = math.random(500, 5000)
                local path, w, bias = H.random_model(wisp, nf, { dtype = dtype, sd = 0.3 })
                local m = assert(wisp.load(path))
                local ws = H.stored_weights(w, nf, dtype)
                local rows = H.random_rows(nf, { kind = kind, rows = 300, max_len = 60, values = "any" })
                -- the edges: first and last id, the first id out of range, an empty row
                rows[#rows + 1] = { ids = { 0, nf - 1, nf, nf - 1 } }
                rows[#rows + 1] = { ids = {} }
                local want, want_oor, want_nnz = H.ref_scores(ws, nf, bias, rows)
                local s = assert(m:session("cpu"))

                -- Lua tables
                local b = wisp.batch()
                H.add_rows(b, rows)
                local out, n = s:score(b)
                assert.equal(#rows, n)
                H.assert_scores(out, want, #rows, TOL, false, dtype .. "/" .. kind .. " lua rows")
                local st = s:stats()
                assert.equal(1, st.batches)
                assert.equal(#rows, st.rows)
                assert.equal(want_nnz, st.nnz)
                assert.equal(want_oor, st.out_of_range)
                assert.equal(0, st.bad_rows)
                assert.is_true(st.ns_total > 0)
                assert.equal("cpu", s:last_device())

                -- batch_from_rows
                H.assert_scores(s:score_table(assert(wisp.batch_from_rows(rows))), want, #rows, TOL, true, "batch_from_rows")

                -- zero-copy FFI batches in each value mode
                -- binary mode (no values at all): the reference with values dropped
                local brows = {}
                for r, row in ipairs(rows) do
                    local ids = {}
                    for _, id in ipairs(row.ids) do ids[#ids + 1] = id end
                    for _, id in ipairs(row.bids or {}) do ids[#ids + 1] = id end
                    brows[r] = { ids = ids }
                end
                local bwant = H.ref_scores(ws, nf, bias, brows)
                H.assert_scores(s:score(ffi_batch(rows, "binary")), bwant, #rows, TOL, false, "ffi binary")
                H.assert_scores(s:score(ffi_batch(rows, "all")), want, #rows, TOL, false, "ffi all-valued")
                H.assert_scores(s:score(ffi_batch(rows, "mixed")), want, #rows, TOL, false, "ffi mixed")

                -- libsvm text
                local tb = wisp.batch()
                assert.equal(#rows, (tb:parse_libsvm(H.libsvm_text(rows))))
                H.assert_scores(s:score(tb), want, #rows, TOL, false, "libsvm")

                -- every usable GPU agrees with the CPU
                for _, dev in ipairs(gpus()) do
                    local g = assert(m:session(dev))
                    H.assert_scores(g:score(b), want, #rows, GPU_TOL, false, dev .. " " .. dtype .. "/" .. kind)
                    assert.equal(dev, g:last_device())
                end
            end)
        end
    end

    it("scores malformed libsvm lines as NaN and the rest exactly", function()
        local nf = 100
        local path, w, bias = H.random_model(wisp, nf)
        local ws = H.stored_weights(w, nf, "f32")
        local m = assert(wisp.load(path))
        local b = wisp.batch()
        b:parse_libsvm("1 1:0.5 2:1\n1 bad\n\n1 3\n1 4:zz\n")
        local want = {
            H.sigmoid(bias + ws[1] * 0.5 + ws[2]), 0 / 0, H.sigmoid(bias + ws[3]), 0 / 0,
        }
        local s = assert(m:session("cpu"))
        local out, n = s:score(b)
        assert.equal(4, n)
        H.assert_scores(out, want, 4, TOL)
        assert.equal(2, s:stats().bad_rows)
        local bad = b:bad_rows()
        assert.same({ 1, 3 }, { bad[1].row, bad[2].row })
        assert.same({ 2, 5 }, { bad[1].line, bad[2].line })
    end)

    it("reuse one output array per session, overwritten by the next call", function()
        local path, w, bias = H.random_model(wisp, 10)
        local s = assert(assert(wisp.load(path)):session("cpu"))
        local b1 = wisp.batch_from_rows { { 1 }, { 2 } }
        local b2 = wisp.batch_from_rows { { 3 }, { 4 } }
        local o1 = s:score(b1)
        local first = o1[0]
        local t1 = s:score_table(b1)
        local o2 = s:score(b2)
        assert.is_true(o1 == o2)                       -- the same array...
        assert.are_not.equal(first, o2[0])             -- ...overwritten
        assert.equal(first, t1[1])                     -- the table copy is not
        assert.is_true(math.abs(t1[2] - H.sigmoid(bias + H.f32(w[2]))) < TOL)
        -- it grows for a larger batch
        local big = {}
        for i = 1, 1000 do big[i] = { i % 10 } end
        local o3, n = s:score(wisp.batch_from_rows(big))
        assert.equal(1000, n)
        assert.is_true(math.abs(o3[999] - H.sigmoid(bias + H.f32(w[0]))) < TOL)
        -- an empty batch
        local o4, n4 = s:score(wisp.batch())
        assert.is_truthy(o4)
        assert.equal(0, n4)
        assert.same({}, s:score_table(wisp.batch()))
    end)

    it("write into a caller's array, checked for size", function()
        local path = H.random_model(wisp, 10)
        local s = assert(assert(wisp.load(path)):session("cpu"))
        local b = wisp.batch_from_rows { { 1 }, { 2 }, { 3 } }
        local out = ffi.new("float[?]", 3)
        assert.is_true(s:score(b, out) == out)
        local fixed = ffi.new("float[4]")
        assert.is_true(s:score(b, fixed) == fixed)
        assert.equal(out[2], fixed[2])
        local p = ffi.cast("float *", ffi.new("float[3]"))
        assert.is_true(s:score(b, p) == p)
        raises("bad argument #2 to 'score' (out holds 2 floats, the batch has 3 rows)", s.score, s, b, ffi.new("float[?]", 2))
        raises("bad argument #2 to 'score' (out holds 2 floats, the batch has 3 rows)", s.score, s, b, ffi.new("float[2]"))
        raises("bad argument #2 to 'score' (float array expected, got double [3])", s.score, s, b, ffi.new("double[3]"))
        raises("bad argument #2 to 'score' (float array expected, got table)", s.score, s, b, {})
    end)

    it("give the same bits whatever the thread count", function()
        local nf = 20000
        local path = H.random_model(wisp, nf)
        local rows = H.random_rows(nf, { rows = 5000, max_len = 39, kind = "zipf" })
        local ref
        for _, threads in ipairs { 1, 2, 3, 4 } do
            local e = assert(wisp.engine { threads = threads })
            assert.equal(threads, e:threads())
            local m = assert(wisp.load(path, { engine = e }))
            local b = assert(e:batch())
            H.add_rows(b, rows)
            local t = assert(m:session("cpu")):score_table(b)
            if not ref then
                ref = t
            else
                for i = 1, #rows do
                    assert(ref[i] == t[i] or (ref[i] ~= ref[i] and t[i] ~= t[i]),
                           ("row %d: %d threads give %.9g, 1 thread %.9g"):format(i - 1, threads, t[i], ref[i]))
                end
            end
        end
    end)

    it("place on devices, and fall back or fail clearly", function()
        local path = H.random_model(wisp, 10)
        local m = assert(wisp.load(path))
        local s = assert(m:session())
        assert.equal("auto", s:device())
        assert.is_true(s:set_device("cpu"))
        assert.equal("cpu", s:device())
        local ok, err = s:set_device("tpu")
        assert.is_nil(ok)
        assert.matches("set_device: ", err, 1, true)
        assert.matches("tpu", err, 1, true)
        assert.equal("cpu", s:device())   -- unchanged
        local s2, err2 = m:session("bogus")
        assert.is_nil(s2)
        assert.matches("session: ", err2, 1, true)
        local s3, err3 = wisp.session(m, "gpu:99")
        assert.is_nil(s3)
        assert.is_string(err3)
        -- "auto" scores somewhere and says where
        local b = wisp.batch_from_rows { { 1 } }
        local sa = assert(wisp.session(m, "auto"))
        assert.is_truthy(sa:score(b))
        assert.is_truthy(sa:last_device():match("^cpu$") or sa:last_device():match("^gpus?:%d+$"))
    end)

    it("keep statistics until reset, and take the caller's own", function()
        local path = H.random_model(wisp, 10)
        local s = assert(assert(wisp.load(path)):session("cpu"))
        local b = wisp.batch_from_rows { { 1, 2, 30 }, {} }
        for _ = 1, 3 do assert(s:score(b)) end
        local st = s:stats()
        assert.equal(3, st.batches)
        assert.equal(6, st.rows)
        assert.equal(9, st.nnz)
        assert.equal(3, st.out_of_range)
        -- every statistic named by the library is there, as a number
        local n = 0
        for i = 0, wisp.const.WISP_STAT_COUNT - 1 do
            local name = wisp.stat_names[i]
            assert.is_number(st[name], name)
            n = n + 1
        end
        assert.equal(wisp.const.WISP_STAT_COUNT, n)
        assert.is_number(st.ns_total)
        s:add_stat("ns_parse", 1234)
        s:add_stat(wisp.const.WISP_STAT_NS_PARSE, 1)
        assert.equal(1235, s:stats().ns_parse)
        s:reset_stats()
        for name, v in pairs(s:stats()) do assert.equal(0, v, name) end
        raises("bad argument #1 to 'add_stat' (statistic name expected, got bogus)", s.add_stat, s, "bogus", 1)
        raises("bad argument #2 to 'add_stat' (amount: non-negative integer expected, got -1)", s.add_stat, s, "rows", -1)
    end)

    it("list the devices: the CPU first, then GPUs or the reason there are none", function()
        local list, status = wisp.devices()
        assert.equal("cpu", list[1].name)
        assert.equal("cpu", list[1].kind)
        assert.is_true(list[1].threads >= 1)
        assert.is_string(status)
        assert.equal(status, list.gpu_status)
        local e = wisp.engine { threads = 2 }
        local l2 = e:devices()
        assert.equal(2, l2[1].threads)
        assert.equal(#list - 1, e:gpu_count())
        for i = 2, #list do
            local d = list[i]
            assert.equal("gpu:" .. (i - 2), d.name)
            assert.equal("gpu", d.kind)
            assert.is_string(d.product)
            assert.is_true(d.memory > 0)
            assert.is_true(d.capability >= 30)
            assert.is_boolean(d.usable)
        end
        if #list == 1 then assert.is_true(#status > 0) end
    end)

    it("engines: threads, logging, closing", function()
        local e = assert(wisp.engine { threads = 1 })
        assert.equal(1, e:threads())
        e:set_log_level("off")
        e:set_log_level(wisp.const.WISP_LOG_WARN)
        local ll = e:last_log()
        assert.is_true(ll == nil or type(ll) == "string")
        raises("bad argument #1 to 'set_log_level' (debug, info, warn, error or off expected, got loud)", e.set_log_level, e, "loud")
        raises("bad argument #1 to 'engine' (threads: non-negative integer expected, got -2)", wisp.engine, { threads = -2 })
        raises("bad argument #1 to 'engine' (table expected, got number)", wisp.engine, 4)
        -- objects made from an engine outlive its close
        local path = H.random_model(wisp, 10)
        local m = assert(e:load(path))
        local b = assert(e:batch())
        assert(b:add { 1 })
        local s = assert(m:session("cpu"))
        e:close()
        e:close()
        assert.is_true(e:is_closed())
        assert.equal(1, #s:score_table(b))
        raises("calling 'threads' on a closed engine", e.threads, e)
        raises("bad argument #2 to 'load' (engine is closed)", wisp.load, path, { engine = e })
        raises("calling 'session' on a model whose engine is closed", m.session, m, "cpu")
        assert.is_truthy(wisp.default_engine())
    end)

    describe("caller mistakes raise", function()
        it("in score", function()
            local path = H.random_model(wisp, 10)
            local s = assert(assert(wisp.load(path)):session("cpu"))
            raises("bad argument #1 to 'score' (batch expected, got nil)", s.score, s)
            raises("bad argument #1 to 'score' (batch expected, got table)", s.score, s, {})
            raises("bad argument #1 to 'score_table' (batch expected, got nil)", s.score_table, s)
            raises("bad argument #1 to 'set_device' (string expected, got nil)", s.set_device, s)
            local b = wisp.batch()
            b:close()
            raises("bad argument #1 to 'score' (batch is closed)", s.score, s, b)
            raises("calling 'score' on bad self (session expected, got batch)", s.score, b, b)
            local ok, err = pcall(function() s:score(nil) end)
            assert.matches("score_spec.lua:%d+: bad argument #1 to 'score'", err)
        end)

        it("when a closed session is used", function()
            local path = H.random_model(wisp, 10)
            local s = assert(assert(wisp.load(path)):session("cpu"))
            s:close()
            s:close()
            assert.is_true(s:is_closed())
            for _, name in ipairs { "score", "score_table", "set_device", "device", "last_device", "stats", "reset_stats", "add_stat" } do
                local ok, err = pcall(s[name], s, wisp.batch())
                assert.is_false(ok, name)
                assert.matches("calling '" .. name .. "' on a closed session", err, 1, true)
            end
        end)
    end)

    it("are freed by gc with their models, batches and engines in any order", function()
        local path = H.random_model(wisp, 50)
        local keep = {}
        for i = 1, 600 do
            local e = wisp.engine { threads = 1 }
            local m = assert(wisp.load(path, { engine = e }))
            local s = assert(m:session("cpu"))
            local b = assert(wisp.batch_from_rows({ { i % 50 } }, e))
            assert(s:score(b))
            if i % 4 == 0 then keep[#keep + 1] = s end
            if i % 4 == 1 then keep[#keep + 1] = b end
            if i % 7 == 0 then m:close() end
            if i % 5 == 0 then e:close() end
        end
        collectgarbage(); collectgarbage()
        for _, o in ipairs(keep) do
            if getmetatable(o) == wisp.Session then
                assert.is_truthy(o:score(wisp.batch_from_rows { { 1 } }))
            else
                assert.equal(1, o:rows())
            end
        end
        keep = nil
        collectgarbage(); collectgarbage()
    end)

    it("keep the scoring loop JIT-compiled", function()
        local jit = require "jit"
        if not jit.status() then return pending("the JIT is off") end
        local path = H.random_model(wisp, 1000)
        local s = assert(assert(wisp.load(path)):session("cpu"))
        local b = wisp.batch()
        local ids, vals = {}, {}
        -- aborts that mean "this cannot be compiled" (NYI), and traces started, in the
        -- modules of the scoring loop (batch:add in batch.lua, session:score in session.lua)
        local aborts, started = {}, 0
        local okv, vmdef = pcall(require, "jit.vmdef")
        if not okv then return pending("jit.vmdef (LuaJIT's jit/*.lua) is not on package.path") end
        local jutil = require "jit.util"
        jit.flush()
        local function on_trace(what, tr, func, pc, otr, oex)
            local info = jutil.funcinfo(func, pc)
            local src = info.source
            if not (src and (src:find("wisp/batch.lua", 1, true) or src:find("wisp/session.lua", 1, true)
                             or src:find("wisp/base.lua", 1, true))) then return end
            if what == "start" then
                started = started + 1
            elseif what == "abort" then
                local msg = vmdef.traceerr[otr]
                if type(msg) == "string" and type(oex) == "number" and msg:find("%%[ds]") then msg = msg:format(oex) end
                msg = tostring(msg)
                if msg:find("NYI") or msg:find("blacklisted") then
                    aborts[#aborts + 1] = ("%s:%s: %s"):format(info.source, tostring(info.currentline), msg)
                end
            end
        end
        jit.attach(on_trace, "trace")
        local sum = 0
        for iter = 1, 300 do
            b:clear()
            for r = 1, 8 do
                for k = 1, 20 do ids[k] = (iter * 31 + r * 7 + k * 13) % 1000; vals[k] = k * 0.01 end
                b:add(ids, vals)
            end
            local out, n = s:score(b)
            for i = 0, n - 1 do sum = sum + out[i] end
        end
        jit.attach(on_trace)   -- detach
        assert.is_true(sum > 0)
        assert.same({}, aborts)
        assert.is_true(started > 0, "no trace started in wisp/batch.lua, session.lua or base.lua")
    end)
end)

describe("session:submit / session:wait", function()
  local wisp = require "wisp"
  local ffi = require "ffi"
  it("scores a stream of batches in submit order, equal to score()", function()
    local path = os.tmpname()
    local w = {}
    for i = 1, 100 do w[i] = (i % 7 - 3) / 10 end
    assert(wisp.write_model(path, w, { bias = 0.25 }))
    local m = assert(wisp.load(path))
    local s = m:session("auto")
    local ref = m:session("cpu")
    local batches, outs = {}, {}
    for k = 1, 6 do
      local b = wisp.batch()
      for r = 1, k * 3 do b:add({ (r * k) % 120, (r + k) % 100 }, { 0.5, r / 10 }) end
      batches[k], outs[k] = b, ffi.new("float[?]", k * 3)
    end
    for k = 1, 6 do assert(s:submit(batches[k], outs[k])) end
    for k = 1, 6 do
      local b, out = assert(s:wait())
      assert.equal(batches[k], b)
      assert.equal(outs[k], out)
      local want = ref:score_table(b)
      for r = 1, #want do assert.near(want[r], out[r - 1], 1e-6) end
    end
    local ok, err = s:wait()
    assert.is_nil(ok)
    assert.truthy(err:find("nothing", 1, true))
    assert.has_error(function() s:submit(batches[1], nil) end)
    s:close(); ref:close(); m:close()
    os.remove(path)
  end)
end)

describe("a batch in flight (submitted, not yet waited for) belongs to wisp", function()
  local wisp = require "wisp"
  local ffi = require "ffi"
  local path, m
  setup(function()
    path = os.tmpname()
    local w = {}
    for i = 1, 50 do w[i] = (i % 5 - 2) / 10 end
    assert(wisp.write_model(path, w, { bias = -0.1 }))
    m = assert(wisp.load(path))
  end)
  teardown(function() m:close(); os.remove(path) end)
  local function rows_batch(n)
    local b = wisp.batch()
    for r = 1, n do assert(b:add({ r % 50, (3 * r) % 50 }, { 0.25, r / 8 })) end
    return b
  end
  local devices = { "cpu", "auto" }
  for _, d in ipairs(gpus()) do devices[#devices + 1] = d end
  for _, device in ipairs(devices) do
    it("refuses close, clear, add and a second submit until its wait (" .. device .. ")", function()
      local s = assert(m:session(device))
      local b, out = rows_batch(40), ffi.new("float[40]")
      assert(s:submit(b, out))
      raises("calling 'close' on a batch that is submitted and not yet waited for", function() b:close() end)
      raises("calling 'clear' on a batch that is submitted and not yet waited for", function() b:clear() end)
      raises("calling 'add' on a batch that is submitted and not yet waited for", function() b:add({ 1 }) end)
      raises("calling 'parse_libsvm' on a batch that is submitted", function() b:parse_libsvm("1 2:1\n") end)
      raises("batch is already submitted and not yet waited for", function() s:submit(b, ffi.new("float[40]")) end)
      assert.is_false(b:is_closed())
      local got, gout = assert(s:wait())
      assert.equal(b, got)
      assert.equal(out, gout)
      local want = m:session("cpu"):score_table(b)
      for r = 1, 40 do assert.near(want[r], out[r - 1], GPU_TOL) end
      assert(s:submit(b, out))                          -- its own again: another submit, then close
      assert(s:wait())
      b:add({ 3 })
      b:close()
      assert.is_true(b:is_closed())
      s:close()
    end)
    it("keeps a dropped in-flight batch alive through a collection; the session's close frees it (" .. device .. ")", function()
      local s = assert(m:session(device))
      local outs = {}
      for k = 1, 3 do
        outs[k] = ffi.new("float[?]", 30 * k)
        assert(s:submit(rows_batch(30 * k), outs[k]))   -- no reference kept but the session's
      end
      collectgarbage(); collectgarbage()
      local b1 = assert(s:wait())
      assert.equal(30, b1:rows())                       -- a live handle, the rows it had
      local want = m:session("cpu"):score_table(b1)
      for r = 1, 30 do assert.near(want[r], outs[1][r - 1], GPU_TOL) end
      b1:close()
      s:close()                                         -- finishes the two in flight, gives them back
      collectgarbage(); collectgarbage()
      -- a session dropped with batches in flight: its finalizer finishes them, theirs free them
      local s2 = assert(m:session(device))
      for k = 1, 3 do assert(s2:submit(rows_batch(10), ffi.new("float[10]"))) end
      s2 = nil
      collectgarbage(); collectgarbage(); collectgarbage()
    end)
    it("gives a batch back when its session is closed before the wait (" .. device .. ")", function()
      local s = assert(m:session(device))
      local b, out = rows_batch(20), ffi.new("float[20]")
      assert(s:submit(b, out))
      s:close()
      local want = m:session("cpu"):score_table(b)
      for r = 1, 20 do assert.near(want[r], out[r - 1], GPU_TOL) end   -- finished by the close
      b:close()
      assert.is_true(b:is_closed())
    end)
  end
end)
