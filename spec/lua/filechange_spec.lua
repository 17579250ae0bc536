-- filechange_spec.lua — model:file_changed() and a model that keeps its verified bytes while its file is rewritten, truncated or replaced (Lua side of spec/c/test_filechange.c).
local wisp = require "wisp"
local H = require "helpers"

describe("a model file changed under a loaded model", function()
    after_each(H.cleanup)

    local function scores(m)
        local s = assert(m:session("cpu"))
        local b = wisp.batch_from_rows { { 0, 1, 2 }, { 3, 4000 - 1 }, { 1234, 5, 2500 } }
        local p = s:score_table(b)
        b:close()
        s:close()
        return p
    end

    local function age(path)   -- older times, so the next write changes mtime on any file system
        assert(H.sh("touch -d '1 minute ago' " .. path) ~= nil)
    end

    for _, case in ipairs {
        { "cp over it in place", "rewritten in place", function(path, other) H.sh("cp " .. other .. " " .. path) end },
        { "truncated to half", "truncated in place", function(path) H.sh("truncate -s 8000 " .. path) end },
        { "bytes flipped in the weights", "rewritten in place",
          function(path)   -- in Lua, not dd: the ASan pass preloads its runtime into every child process
              local f = assert(io.open(path, "r+b"))
              assert(f:seek("set", 6000))
              assert(f:write("XXXXXXXX"))
              assert(f:close())
          end },
        { "renamed over", "replaced", function(path, other)
            H.sh("cp " .. other .. " " .. path .. ".new && mv " .. path .. ".new " .. path) end },
        { "removed", "removed", function(path) os.remove(path) end },
    } do
        local name, word, change = case[1], case[2], case[3]
        it(name .. ": scores stay the verified model's, file_changed says " .. word, function()
            local path = H.random_model(wisp, 4000, { bias = 0.5 })
            local other = H.random_model(wisp, 4000, { bias = -1 })
            age(path)
            local m = assert(wisp.load(path))
            local before = scores(m)
            assert.is_false((m:file_changed()))
            change(path, other)
            local changed, why = m:file_changed()
            assert.is_true(changed)
            assert.matches(word, why, 1, true)
            assert.matches(path, why, 1, true)
            local after = scores(m)
            for i = 1, #before do assert.equal(before[i], after[i]) end
            assert.equal(0.5, m:bias())
            m:close()
        end)
    end

    it("file_changed on a closed model is a caller error", function()
        local m = assert(wisp.load((H.random_model(wisp, 10))))
        m:close()
        assert.has_error(function() m:file_changed() end)
    end)
end)
