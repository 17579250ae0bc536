-- oom_spec.lua — every library allocation made to fail in turn under the Lua layer: each call returns nil, err (never a crash, never a wrong score).
local ffi = require "ffi"
local wisp = require "wisp"
local H = require "helpers"
local C = require "wisp.cdef"

-- the library's test hook (core/wisp_test.h, exported by libwisp.so); declared
-- here only, for this spec, as it is not part of the public API
pcall(ffi.cdef, "uint64_t wisp_fault_alloc_after(uint64_t nth);")
local have_hook = pcall(function() return C.wisp_fault_alloc_after end)

describe("out of host memory", function()
    after_each(function()
        if have_hook then C.wisp_fault_alloc_after(0) end
        H.cleanup()
    end)

    it("makes each call return nil, err and leaves everything usable", function()
        if not have_hook then return pending("the library has no wisp_fault_alloc_after") end
        local nf = 200
        local path, w, bias = H.random_model(wisp, nf, { meta = { k = "v" }, columns = "c" })
        local ws = H.stored_weights(w, nf, "f32")
        local rows = H.random_rows(nf, { rows = 40, max_len = 30, huge = false })
        local want = H.ref_scores(ws, nf, bias, rows)
        local text = H.libsvm_text(rows)
        local out_path = H.tmpname(".wisp")

        -- one pass over the API; returns the stage that failed and its error, or nil
        local function pass()
            local e, err = wisp.engine { threads = 2 }
            if not e then return "engine", err end
            local m; m, err = e:load(path)
            if not m then return "load", err end
            local s; s, err = m:session("cpu")
            if not s then return "session", err end
            local b; b, err = e:batch()
            if not b then return "batch", err end
            for _, row in ipairs(rows) do
                local ok
                if row.bids then ok, err = b:add_mixed(row.ids, row.vals, row.bids)
                else ok, err = b:add(row.ids, row.vals) end
                if not ok then return "add", err end
            end
            local out; out, err = s:score(b)
            if not out then return "score", err end
            H.assert_scores(out, want, #rows, 1e-6, false, "scores under fault injection")
            local tb; tb, err = e:batch()
            if not tb then return "batch", err end
            local added; added, err = tb:parse_libsvm(text)
            if not added then return "parse_libsvm", err end
            out, err = s:score(tb)
            if not out then return "score", err end
            H.assert_scores(out, want, #rows, 1e-6, false, "libsvm scores under fault injection")
            local ok; ok, err = m:convert(out_path, "f16")
            if not ok then return "convert", err end
            ok, err = wisp.write_model(out_path, H.one_based(w, nf), { bias = bias, meta = { a = "b" } })
            if not ok then return "write_model", err end
            local bf; bf, err = wisp.batch_from_rows({ { 1, 2 }, { ids = { 3 }, vals = { 0.5 } } }, e)
            if not bf then return "batch_from_rows", err end
            return nil
        end

        local failures, n = {}, 0
        while true do
            n = n + 1
            C.wisp_fault_alloc_after(n)
            local stage, err = pass()
            local seen = tonumber(C.wisp_fault_alloc_after(0))
            if stage then
                assert.is_string(err)
                assert.is_true(#err > 0, stage .. ": empty error")
                failures[stage] = (failures[stage] or 0) + 1
            elseif seen < n then
                break   -- a whole pass without reaching allocation n: every one was tried
            end
            collectgarbage()
            assert(n < 5000, "too many allocations")
        end
        if os.getenv("WISP_VERBOSE") then
            for k, v in pairs(failures) do io.stderr:write(("oom: %s failed %d times\n"):format(k, v)) end
            io.stderr:write("oom: ", n, " allocation points\n")
        end
        assert.is_true(n > 10, "only " .. n .. " allocations")
        -- failures surfaced in several stages, as nil, err
        assert.is_truthy(failures.load)
        assert.is_truthy(failures.batch or failures.add)
    end)
end)
