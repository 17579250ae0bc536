-- batch_spec.lua — batches from Lua tables, FFI arrays (zero-copy) and libsvm text: CSR contents, bad rows with line numbers, bad arguments, closed handles.
local ffi = require "ffi"
local wisp = require "wisp"
local H = require "helpers"

local NONE = 0xFFFFFFFF   -- the id a batch stores for ids >= 2^32

local function raises(pattern, fn, ...)
    local ok, err = pcall(fn, ...)
    assert.is_false(ok, "no error, wanted " .. pattern)
    assert.matches(pattern, err, 1, true)
end

-- the CSR a list of rows should produce (ids as stored)
local function expected_csr(rows)
    local indptr, ids, val_ptr, vals = { 0 }, {}, { 0 }, {}
    local any_vals = false
    for _, row in ipairs(rows) do
        for _, id in ipairs(row.ids) do ids[#ids + 1] = id >= 2 ^ 32 and NONE or id end
        for _, id in ipairs(row.bids or {}) do ids[#ids + 1] = id >= 2 ^ 32 and NONE or id end
        if row.vals then
            any_vals = true
            for _, v in ipairs(row.vals) do vals[#vals + 1] = v end
        end
        indptr[#indptr + 1] = #ids
        val_ptr[#val_ptr + 1] = #vals
    end
    return { indptr = indptr, ids = ids, val_ptr = val_ptr, vals = vals, any_vals = any_vals }
end

-- Each row's features as sorted {id, value} pairs (binary features have value 1).
local function features(b)
    local csr = b:csr()
    local out = {}
    for r = 1, #csr.indptr - 1 do
        local s, e = csr.indptr[r], csr.indptr[r + 1]
        local nv, v0 = 0, 0
        if csr.val_ptr then
            nv, v0 = csr.val_ptr[r + 1] - csr.val_ptr[r], csr.val_ptr[r]
        elseif csr.vals then
            nv, v0 = e - s, s
        end
        local row = {}
        for k = s, e - 1 do
            local v = 1
            if k - s < nv then v = csr.vals[v0 + (k - s) + 1] end
            row[#row + 1] = { csr.ids[k + 1], v }
        end
        table.sort(row, function(a, c) return a[1] < c[1] or (a[1] == c[1] and a[2] < c[2]) end)
        out[r] = row
    end
    return out
end

describe("batches", function()
    after_each(H.cleanup)

    it("start empty", function()
        local b = wisp.batch()
        assert.equal(0, b:rows())
        assert.equal(0, b:nnz())
        assert.equal(0, b:nvals())
        assert.same({}, b:bad_rows())
        assert.is_false(b:is_wrapped())
    end)

    it("add binary, valued, mixed and empty rows", function()
        local b = wisp.batch()
        assert.is_true(b:add { 3, 17, 4096 })
        assert.is_true(b:add({ 5, 6 }, { 0.5, 2 }))
        assert.is_true(b:add {})
        assert.is_true(b:add_mixed({ 9 }, { -1.5 }, { 1, 2 }))
        assert.is_true(b:add { 2 ^ 32, 2 ^ 53, ffi.new("uint64_t", -1), ffi.new("int64_t", 7) })
        assert.equal(5, b:rows())
        assert.equal(3 + 2 + 0 + 3 + 4, b:nnz())
        assert.equal(3, b:nvals())
        local csr = b:csr()
        assert.same({ 0, 3, 5, 5, 8, 12 }, csr.indptr)
        assert.same({ 3, 17, 4096, 5, 6, 9, 1, 2, NONE, NONE, NONE, 7 }, csr.ids)
        assert.same({ 0.5, 2, -1.5 }, csr.vals)
        assert.same({ 0, 0, 2, 2, 3, 3 }, csr.val_ptr)
    end)

    it("take an empty first row in every form", function()
        for _, add in ipairs {
            function(b) return b:add {} end,
            function(b) return b:add({}, {}) end,
            function(b) return b:add_mixed({}, {}, {}) end,
        } do
            local b = wisp.batch()
            assert.is_true(add(b))
            assert.is_true(add(b))
            assert.equal(2, b:rows())
            assert.equal(0, b:nnz())
            assert.same({ 0, 0, 0 }, b:csr().indptr)
        end
        assert.equal(1, wisp.batch_from_rows({ { ids = {}, bids = {} } }):rows())
    end)

    it("hold random rows exactly, through scratch arrays that grow", function()
        local rows = H.random_rows(1000, { rows = 300, max_len = 200, values = "any" })
        -- one long row to force growth past the doubling
        local long = {}
        for i = 1, 5000 do long[i] = i end
        rows[#rows + 1] = { ids = long }
        local b = wisp.batch()
        H.add_rows(b, rows)
        local want = expected_csr(rows)
        local csr = b:csr()
        assert.equal(#rows, b:rows())
        assert.same(want.indptr, csr.indptr)
        assert.same(want.ids, csr.ids)
        -- valued features of a row come first, binary ones after
        local nv = 0
        for _, row in ipairs(rows) do nv = nv + (row.vals and #row.vals or 0) end
        assert.equal(nv, b:nvals())
    end)

    it("batch_from_rows accepts {ids=, vals=}, {ids=, vals=, bids=} and plain id arrays", function()
        local b = assert(wisp.batch_from_rows {
            { ids = { 1, 2 }, vals = { 0.5, 0.25 } },
            { ids = { 3 } },
            { 4, 5, 6 },
            {},
            { ids = { 7 }, vals = { 2 }, bids = { 8, 9 } },
            { ids = {}, bids = { 10 } },
        })
        assert.equal(6, b:rows())
        local csr = b:csr()
        assert.same({ 0, 2, 3, 6, 6, 9, 10 }, csr.indptr)
        assert.same({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, csr.ids)
        assert.same({ 0.5, 0.25, 2 }, csr.vals)
        local e = wisp.engine { threads = 1 }
        local b2 = assert(e:batch_from_rows { { 1 } })
        assert.equal(1, b2:rows())
        assert.equal(1, assert(wisp.batch_from_rows({ { 1 } }, e)):rows())
    end)

    it("return nil, err past a limit, with the batch unchanged", function()
        local b = wisp.batch()
        assert(b:add { 1 })
        local ids = {}
        for i = 1, wisp.const.WISP_MAX_ROW_FEATURES + 1 do ids[i] = i % 1000 end
        local ok, err = b:add(ids)
        assert.is_nil(ok)
        assert.matches("^add: ", err)
        assert.equal(1, b:rows())
        assert.equal(1, b:nnz())
        ids[#ids] = nil
        assert.is_true(b:add(ids))   -- exactly the limit is fine
        assert.equal(2, b:rows())
    end)

    it("clear forgets rows and bad rows, and the batch is reusable", function()
        local b = wisp.batch()
        for r = 1, 100 do assert(b:add({ r, r + 1 }, { 1, 2 })) end
        b:parse_libsvm("1 x:y\n")
        assert.equal(1, #b:bad_rows())
        b:clear()
        assert.equal(0, b:rows())
        assert.equal(0, b:nnz())
        assert.same({}, b:bad_rows())
        assert(b:add { 42 })
        assert.same({ 42 }, b:csr().ids)
        assert.same({ 0, 1 }, b:csr().indptr)
    end)

    describe("zero-copy FFI batches", function()
        it("wrap caller arrays in each value mode", function()
            local indptr = ffi.new("uint32_t[4]", { 0, 2, 2, 5 })
            local ids = ffi.new("uint32_t[5]", { 1, 2, 3, 4, NONE })
            local b = assert(wisp.batch_from_ffi(3, indptr, ids))
            assert.is_true(b:is_wrapped())
            assert.equal(3, b:rows())
            assert.equal(5, b:nnz())
            assert.same({ 0, 2, 2, 5 }, b:csr().indptr)
            -- every feature valued
            local vals = ffi.new("float[5]", { 1, 2, 3, 4, 5 })
            local b2 = assert(wisp.batch_from_ffi(3, indptr, ids, nil, vals))
            assert.same({ 1, 2, 3, 4, 5 }, b2:csr().vals)
            -- mixed: row 0 has one valued feature, row 2 two
            local val_ptr = ffi.new("uint32_t[4]", { 0, 1, 1, 3 })
            local b3 = assert(wisp.batch_from_ffi(3, indptr, ids, val_ptr, vals))
            assert.same({ 0, 1, 1, 3 }, b3:csr().val_ptr)
            -- pointers (sizes unknown, trusted) and VLAs
            local rp = ffi.new("uint32_t[?]", 4, { 0, 2, 2, 5 })
            local b4 = assert(wisp.batch_from_ffi(3, ffi.cast("uint32_t *", rp), ids))
            assert.equal(5, b4:nnz())
            -- an engine of one's own
            local e = wisp.engine { threads = 1 }
            assert.equal(3, assert(e:batch_from_ffi(3, indptr, ids)):rows())
            assert.equal(3, assert(wisp.batch_from_ffi(3, indptr, ids, nil, nil, e)):rows())
        end)

        it("see the caller's memory without copying it", function()
            local indptr = ffi.new("uint32_t[2]", { 0, 2 })
            local ids = ffi.new("uint32_t[2]", { 1, 2 })
            local b = assert(wisp.batch_from_ffi(1, indptr, ids))
            ids[1] = 99
            assert.same({ 1, 99 }, b:csr().ids)
        end)

        it("keep their arrays alive when the caller drops them", function()
            local function make()
                local n = 1000
                local indptr = ffi.new("uint32_t[?]", n + 1)
                local ids = ffi.new("uint32_t[?]", n)
                local vals = ffi.new("float[?]", n)
                for i = 0, n - 1 do indptr[i + 1] = i + 1; ids[i] = i; vals[i] = i / 2 end
                return assert(wisp.batch_from_ffi(n, indptr, ids, nil, vals))
            end
            local b = make()
            collectgarbage(); collectgarbage()
            -- churn the allocator so freed memory would be reused
            local junk = {}
            for i = 1, 200 do junk[i] = ffi.new("uint32_t[?]", 1000, 0xABAB) end
            local csr = b:csr()
            for i = 1, 1000 do
                assert.equal(i - 1, csr.ids[i])
                assert.equal((i - 1) / 2, csr.vals[i])
            end
        end)

        it("cannot grow or be cleared", function()
            local b = assert(wisp.batch_from_ffi(1, ffi.new("uint32_t[2]", { 0, 1 }), ffi.new("uint32_t[1]", { 5 })))
            raises("calling 'add' on a zero-copy batch", b.add, b, { 1 })
            raises("calling 'add_mixed' on a zero-copy batch", b.add_mixed, b, { 1 }, { 1 }, {})
            raises("calling 'parse_libsvm' on a zero-copy batch", b.parse_libsvm, b, "1 2:3\n")
            raises("calling 'clear' on a zero-copy batch", b.clear, b)
        end)

        it("check their arguments", function()
            local rp = ffi.new("uint32_t[3]", { 0, 1, 2 })
            local ids = ffi.new("uint32_t[2]", { 1, 2 })
            raises("bad argument #1 to 'batch_from_ffi' (rows: non-negative integer expected, got -1)",
                   wisp.batch_from_ffi, -1, rp, ids)
            raises("bad argument #1 to 'batch_from_ffi' (number of rows expected, got nil)", wisp.batch_from_ffi)
            raises("bad argument #2 to 'batch_from_ffi' (uint32_t array expected, got table)", wisp.batch_from_ffi, 2, { 0, 1, 2 }, ids)
            raises("bad argument #2 to 'batch_from_ffi' (uint32_t array expected, got double [3])",
                   wisp.batch_from_ffi, 2, ffi.new("double[3]"), ids)
            raises("bad argument #2 to 'batch_from_ffi' (indptr holds 3 elements, 4 needed)", wisp.batch_from_ffi, 3, rp, ids)
            raises("bad argument #3 to 'batch_from_ffi' (ids holds 1 elements, 2 needed)",
                   wisp.batch_from_ffi, 2, rp, ffi.new("uint32_t[1]"))
            raises("bad argument #3 to 'batch_from_ffi' (uint32_t array expected, got int64_t [2])",
                   wisp.batch_from_ffi, 2, rp, ffi.new("int64_t[2]"))
            raises("bad argument #5 to 'batch_from_ffi' (vals holds 1 elements, 2 needed)",
                   wisp.batch_from_ffi, 2, rp, ids, nil, ffi.new("float[1]"))
            raises("bad argument #5 to 'batch_from_ffi' (vals expected with val_ptr)",
                   wisp.batch_from_ffi, 2, rp, ids, ffi.new("uint32_t[3]"))
            raises("bad argument #6 to 'batch_from_ffi' (engine expected, got string)", wisp.batch_from_ffi, 2, rp, ids, nil, nil, "e")
        end)

        it("return nil, err for arrays the library rejects", function()
            -- indptr not monotone
            local b, err = wisp.batch_from_ffi(2, ffi.new("uint32_t[3]", { 0, 2, 1 }), ffi.cast("uint32_t *", ffi.new("uint32_t[2]")))
            assert.is_nil(b)
            assert.matches("batch_from_ffi: ", err, 1, true)
        end)
    end)

    describe("libsvm text", function()
        it("parses labels, id:value pairs, bare ids, comments and blank lines", function()
            local b = wisp.batch()
            local text = table.concat({
                "1 3:0.5 7:2",          -- line 1
                "# a comment line",     -- 2
                "",                     -- 3
                "-1 5 9:-1.25e1",       -- 4: a bare id is binary
                "0",                    -- 5: a row with no features
                "+1 4:1 # trailing comment",  -- 6
                "   ",                  -- 7
                "1 2:3\r",              -- 8: CRLF
            }, "\n") .. "\n"
            local added, consumed, line = b:parse_libsvm(text)
            assert.equal(5, added)
            assert.equal(#text, consumed)
            assert.equal(8, line)
            assert.same({}, b:bad_rows())
            -- (a value of exactly 1 may be stored as a binary feature)
            assert.same({ { { 3, 0.5 }, { 7, 2 } }, { { 5, 1 }, { 9, -12.5 } }, {}, { { 4, 1 } }, { { 2, 3 } } },
                        features(b))
        end)

        it("marks malformed lines as bad rows with their line numbers, and keeps the rest", function()
            local lines = {
                "1 1:1",                -- 1 good
                "1 a:1",                -- 2 bad id
                "1 2:x",                -- 3 bad value
                "1 3:",                 -- 4 missing value
                "1 99999999999999999999999:1",   -- 5 id overflows 64 bits
                "1 -4:1",               -- 6 negative id
                "label 1:1",            -- 7 bad label
                "1 5:1",                -- 8 good
                "1 6:1e999",            -- 9 value out of float range
                "1 4294967296:2",       -- 10 good: id >= 2^32, out of range of any model
            }
            local b = wisp.batch()
            local added, _, line = b:parse_libsvm(table.concat(lines, "\n"))
            assert.equal(#lines, added)
            assert.equal(#lines, line)
            local bad = b:bad_rows()
            local bad_lines = {}
            for i, r in ipairs(bad) do
                assert.equal(r.line - 1, r.row)      -- one row per line here
                assert.is_string(r.msg)
                assert.is_true(#r.msg > 0)
                bad_lines[i] = r.line
            end
            -- 9 (1e999) may be accepted as inf or rejected; all others are fixed
            local want = { 2, 3, 4, 5, 6, 7 }
            if bad_lines[#bad_lines] == 9 then want[#want + 1] = 9 end
            assert.same(want, bad_lines)
            assert.matches("line 2", bad[1].msg, 1, true)
            assert.equal(#want, b:bad_count())
            -- bad rows have no features; good rows are intact
            local csr = b:csr()
            assert.equal(0, csr.indptr[3] - csr.indptr[2])
            assert.equal(1, csr.indptr[2] - csr.indptr[1])
            assert.equal(NONE, csr.ids[#csr.ids])
        end)

        it("counts lines from opts.line", function()
            local b = wisp.batch()
            local _, _, line = b:parse_libsvm("1 1:1\n1 x\n", { line = 100 })
            assert.equal(102, line)
            assert.equal(102, b:bad_rows()[1].line)
        end)

        it("leaves an unterminated last line for the next call unless final", function()
            local b = wisp.batch()
            local added, consumed, line = b:parse_libsvm("1 1:1\n1 2:2", { final = false })
            assert.equal(1, added)
            assert.equal(6, consumed)
            assert.equal(1, line)
            added, consumed, line = b:parse_libsvm("1 2:2", { final = true, line = line })
            assert.equal(1, added)
            assert.equal(5, consumed)
            assert.equal(2, line)
            assert.same({ 1, 2 }, b:csr().ids)
        end)

        it("stops after max_rows", function()
            local b = wisp.batch()
            local text = "1 1\n1 2\n# c\n1 3\n1 4\n"
            local added, consumed, line = b:parse_libsvm(text, { max_rows = 2 })
            assert.equal(2, added)
            assert.equal(2, b:rows())
            local rest = text:sub(consumed + 1)
            added, consumed, line = b:parse_libsvm(rest, { line = line })
            assert.equal(2, added)
            assert.equal(#rest, consumed)
            assert.equal(5, line)
            assert.same({ 1, 2, 3, 4 }, b:csr().ids)
        end)

        it("gives the same batch and line numbers when fed in random chunks", function()
            local rows = H.random_rows(5000, { rows = 400, values = "any" })
            local lines = {}
            for l in H.libsvm_text(rows):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
            -- sprinkle comments, blank lines and bad lines
            for _ = 1, 30 do
                local at = math.random(1, #lines)
                local u = math.random()
                table.insert(lines, at, u < 0.3 and "# comment" or u < 0.5 and "" or "1 oops:1")
            end
            local text = table.concat(lines, "\n")   -- no final newline
            local whole = wisp.batch()
            local added, consumed, line = whole:parse_libsvm(text)
            assert.equal(#text, consumed)
            assert.equal(#lines, line)
            local chunked = wisp.batch()
            local pending, pos, lno, total = "", 1, 0, 0
            while pos <= #text do
                local n = math.random(1, 300)
                local chunk = pending .. text:sub(pos, pos + n - 1)
                pos = pos + n
                local final = pos > #text
                local a, c, l = chunked:parse_libsvm(chunk, { final = final, line = lno })
                total, lno, pending = total + a, l, chunk:sub(c + 1)
            end
            assert.equal("", pending)
            assert.equal(added, total)
            assert.equal(line, lno)
            assert.same(whole:csr(), chunked:csr())
            assert.same(whole:bad_rows(), chunked:bad_rows())
        end)

        it("reads text from FFI memory", function()
            local s = "1 1:0.5\n1 2\n"
            local buf = ffi.new("uint8_t[?]", #s)
            ffi.copy(buf, s, #s)
            local b = wisp.batch()
            local added, consumed = b:parse_libsvm(buf, #s)
            assert.equal(2, added)
            assert.equal(#s, consumed)
            assert.same({ 1, 2 }, b:csr().ids)
            added = b:parse_libsvm(ffi.cast("const char *", buf), 8, { final = true })
            assert.equal(1, added)
        end)
    end)

    describe("caller mistakes raise", function()
        it("in add and add_mixed", function()
            local b = wisp.batch()
            raises("bad argument #1 to 'add' (table expected, got nil)", b.add, b)
            raises("bad argument #1 to 'add' (table expected, got string)", b.add, b, "1 2")
            raises("bad argument #1 to 'add' (id #2: non-negative integer expected, got -1)", b.add, b, { 1, -1 })
            raises("bad argument #1 to 'add' (id #1: non-negative integer expected, got 1.5)", b.add, b, { 1.5 })
            raises("bad argument #1 to 'add' (id #1: non-negative integer expected, got nan)", b.add, b, { 0 / 0 })
            raises("bad argument #1 to 'add' (id #1: non-negative integer expected, got " .. tostring(2 ^ 64) .. ")", b.add, b, { 2 ^ 64 })
            raises("bad argument #1 to 'add' (id #1: integer expected, got string)", b.add, b, { "1" })
            raises("bad argument #2 to 'add' (table expected, got number)", b.add, b, { 1 }, 1)
            raises("bad argument #2 to 'add' (2 values for 1 ids)", b.add, b, { 1 }, { 1, 2 })
            raises("bad argument #2 to 'add' (value #1: number expected, got string)", b.add, b, { 1 }, { "x" })
            raises("bad argument #2 to 'add_mixed' (table expected, got nil)", b.add_mixed, b, { 1 })
            raises("bad argument #3 to 'add_mixed' (table expected, got nil)", b.add_mixed, b, { 1 }, { 1 })
            raises("bad argument #3 to 'add_mixed' (id #1: integer expected, got boolean)", b.add_mixed, b, { 1 }, { 1 }, { true })
            raises("calling 'add' on bad self (batch expected, got table)", b.add, {}, { 1 })
            -- nothing was added by the failed calls
            assert.equal(0, b:rows())
        end)

        it("in batch_from_rows", function()
            raises("bad argument #1 to 'batch_from_rows' (table expected, got nil)", wisp.batch_from_rows)
            raises("bad argument #1 to 'batch_from_rows' (row 2: table expected, got number)", wisp.batch_from_rows, { {}, 5 })
            raises("bad argument #1 to 'batch_from_rows' (row 1: id #1: non-negative integer expected, got -3)",
                   wisp.batch_from_rows, { { -3 } })
            raises("bad argument #1 to 'batch_from_rows' (row 1: 1 values for 2 ids)", wisp.batch_from_rows, { { ids = { 1, 2 }, vals = { 1 } } })
            raises("bad argument #2 to 'batch_from_rows' (engine expected, got number)", wisp.batch_from_rows, {}, 1)
        end)

        it("in parse_libsvm", function()
            local b = wisp.batch()
            raises("bad argument #1 to 'parse_libsvm' (string expected, got nil)", b.parse_libsvm, b)
            raises("bad argument #2 to 'parse_libsvm' (table expected, got number)", b.parse_libsvm, b, "x", 1)
            raises("bad argument #2 to 'parse_libsvm' (max_rows: non-negative integer expected, got -1)", b.parse_libsvm, b, "x", { max_rows = -1 })
            raises("bad argument #2 to 'parse_libsvm' (line: non-negative integer expected, got x)", b.parse_libsvm, b, "x", { line = "x" })
            raises("bad argument #2 to 'parse_libsvm' (length expected, got nil)", b.parse_libsvm, b, ffi.new("char[3]"))
        end)

        it("at the caller's line", function()
            local b = wisp.batch()
            local ok, err = pcall(function() b:add(nil) end)
            assert.is_false(ok)
            assert.matches("batch_spec.lua:%d+: bad argument #1 to 'add' %(table expected, got nil%)", err)
            ok, err = pcall(function() wisp.batch_from_rows { { -1 } } end)
            assert.matches("batch_spec.lua:%d+: bad argument #1 to 'batch_from_rows'", err)
        end)

        it("when a closed batch is used", function()
            local b = wisp.batch()
            assert(b:add { 1 })
            b:close()
            b:close()
            assert.is_true(b:is_closed())
            for _, name in ipairs { "add", "add_mixed", "parse_libsvm", "rows", "nnz", "nvals", "bad_rows", "csr", "clear" } do
                local ok, err = pcall(b[name], b, { 1 }, { 1 }, {})
                assert.is_false(ok, name)
                assert.matches("calling '" .. name .. "' on a closed batch", err, 1, true)
            end
        end)
    end)

    it("give their C memory back when collected", function()
        local function rss_mb()
            local f = assert(io.open("/proc/self/statm"))
            local _, res = f:read("*n", "*n")
            f:close()
            return res * 4096 / 2 ^ 20
        end
        local ids = {}
        for i = 1, 20000 do ids[i] = i end
        collectgarbage(); collectgarbage()
        local before = rss_mb()
        for i = 1, 1500 do
            local b = wisp.batch()
            for _ = 1, 4 do assert(b:add(ids)) end   -- 80000 features, >= 320 KB in C each
            if i % 50 == 0 then collectgarbage() end
        end
        collectgarbage(); collectgarbage()
        local grown = rss_mb() - before
        -- 1500 leaked batches would hold >= 460 MB
        assert.is_true(grown < 100, ("RSS grew by %.0f MB"):format(grown))
    end)

    it("are freed by gc without trouble", function()
        for i = 1, 3000 do
            local b = wisp.batch()
            b:add { i, i + 1 }
            if i % 3 == 0 then b:close() end
            local w = wisp.batch_from_ffi(1, ffi.new("uint32_t[2]", { 0, 1 }), ffi.new("uint32_t[1]", { i }))
            assert.equal(1, w:rows())
        end
        collectgarbage(); collectgarbage()
        assert.equal(1, wisp.batch_from_rows({ { 1 } }):rows())
    end)
end)

describe("the values rule: a value that is not a finite float32 makes its row bad", function()
    local EDGE = { { 0 / 0, true, "nan" }, { math.huge, true, "inf" }, { -math.huge, true, "-inf" },
                   { 1e39, true, "1e+39" }, { -1e39, true, "-1e+39" }, { 3.4028236e38, true, "3.4028236e+38" },
                   { 3.4028235e38, false }, { 1e-50, false }, { 1.4e-45, false } }
    local function reason_for(k, e)
        return string.format("feature #%d (id 9): value %s is not a finite float32", k, e[3])
    end
    it("batch:add and add_mixed: the row is bad, its neighbours are kept, add returns true and the reason", function()
        for _, mixed in ipairs({ false, true }) do
            local b = wisp.batch()
            local want_bad = {}
            for i, e in ipairs(EDGE) do
                assert(b:add({ 1, 2 }, { 0.5, 1 }))
                local ok, why
                if mixed then ok, why = b:add_mixed({ 9 }, { e[1] }, { 4 })
                else ok, why = b:add({ 3, 9 }, { 1, e[1] }) end
                assert.is_true(ok)
                if e[2] then
                    assert.equal(reason_for(mixed and 1 or 2, e), why)
                    want_bad[#want_bad + 1] = 3 * (i - 1) + 1
                else
                    assert.is_nil(why)
                end
                assert(b:add({ 5 }, { 2 }))
            end
            assert.equal(3 * #EDGE, b:rows())
            local bad = b:bad_rows()
            assert.equal(#want_bad, #bad)
            for j, r in ipairs(want_bad) do
                assert.equal(r, bad[j].row)
                assert.truthy(bad[j].msg:find("is not a finite float32", 1, true), bad[j].msg)
            end
            local c = b:csr()
            for i = 1, #EDGE do
                local r = 3 * (i - 1)                                 -- good rows keep their features
                assert.equal(2, c.indptr[r + 2] - c.indptr[r + 1])
                assert.equal(1, c.indptr[r + 4] - c.indptr[r + 3])
            end
            b:close()
        end
    end)
    it("batch_from_rows and batch_from_ffi follow the same rule; scores are NaN only there", function()
        local rows, fv = {}, ffi.new("float[?]", 2 * #EDGE)
        local rp, ids = ffi.new("uint32_t[?]", #EDGE + 1), ffi.new("uint32_t[?]", 2 * #EDGE)
        for i, e in ipairs(EDGE) do
            rows[i] = { ids = { 3, 9 }, vals = { 1, e[1] } }
            ids[2 * i - 2], ids[2 * i - 1] = 3, 9
            fv[2 * i - 2], fv[2 * i - 1] = 1, e[1]
            rp[i] = 2 * i
        end
        rp[0] = 0
        local path = os.tmpname()
        local w = {}
        for i = 1, 16 do w[i] = (i - 8) / 10 end
        assert(wisp.write_model(path, w, { bias = 0.1 }))
        local m = assert(wisp.load(path))
        local s = m:session("cpu")
        for _, b in ipairs({ assert(wisp.batch_from_rows(rows)), assert(wisp.batch_from_ffi(#EDGE, rp, ids, nil, fv)) }) do
            local bad, k = b:bad_rows(), 0
            local out = s:score_table(b)
            for i, e in ipairs(EDGE) do
                if e[2] then
                    k = k + 1
                    assert.equal(i - 1, bad[k].row)
                    assert.truthy(out[i] ~= out[i], "row " .. i .. " should be NaN")
                else
                    assert.truthy(out[i] == out[i], "row " .. i .. " should be scored")
                end
            end
            assert.equal(k, #bad)
            b:close()
        end
        s:close(); m:close(); os.remove(path)
    end)
end)
