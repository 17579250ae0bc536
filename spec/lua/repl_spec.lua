-- repl_spec.lua — `wisp repl MODEL` driven through a pseudo-terminal (tmux send-keys + capture-pane): line editing and history, plain Lua, and the ':' commands.
local wisp = require "wisp"
local H = require "helpers"

local build = os.getenv("WISP_BUILD") or "build"
local WISP = build .. "/wisp"

local function sh(cmd)
    local p = assert(io.popen(cmd .. " 2>&1"))
    local s = p:read("*a")
    p:close()
    return s
end

local function have_tmux() return sh("command -v tmux"):match("tmux") ~= nil end

describe("wisp repl (through a terminal)", function()
    local sock = "wisp-repl-spec-" .. tostring(os.time()) .. "-" .. tostring(math.random(1e6))
    local home

    -- tmux runs with the system's libraries: an LD_LIBRARY_PATH meant for wisp (the GPU
    -- machine's unpacked Debian packages) can carry an older libtinfo than tmux needs;
    -- the REPL inside gets it back explicitly
    local ldp = os.getenv("LD_LIBRARY_PATH")
    local function tmux(args) return sh((ldp and "env -u LD_LIBRARY_PATH " or "") .. "tmux -L " .. sock .. " " .. args) end
    local function screen() return tmux("capture-pane -p -J -S -400 -t repl") end
    local function send(text)
        tmux("send-keys -t repl -l " .. string.format("%q", text))
        tmux("send-keys -t repl Enter")
    end
    -- wait until the screen matches (plain text), up to `secs`
    local function expect(text, secs)
        local deadline = os.time() + (secs or 15)
        local s
        repeat
            s = screen()
            if s:find(text, 1, true) then return s end
            sh("sleep 0.1")
        until os.time() > deadline
        error("the REPL never showed '" .. text .. "'; screen:\n" .. s, 2)
    end
    local function count(s, text)
        local n, i = 0, 1
        while true do
            local a, b = s:find(text, i, true)
            if not a then return n end
            n, i = n + 1, b + 1
        end
    end

    before_each(function()
        if not have_tmux() or not H.file_exists(WISP) then return end
        home = H.tmpname()
        os.remove(home)
        assert(os.execute("mkdir -p " .. home) == 0)
        local model = (H.random_model(wisp, 4000))
        tmux(string.format("new-session -d -s repl -x 200 -y 60 'env HOME=%s%s %s repl %s'", home,
                           ldp and (" LD_LIBRARY_PATH=" .. ldp) or "", WISP, model))
        expect("wisp>")
    end)

    after_each(function()
        if have_tmux() then tmux("kill-server") end
        if home then os.execute("rm -rf " .. home) end
        H.cleanup()
    end)

    it("evaluates plain Lua, keeps history and edits lines", function()
        if not have_tmux() then return pending("tmux is not installed") end
        if not H.file_exists(WISP) then return pending("no wisp CLI built") end
        send("x = 20 + 1")
        send("x * 2")
        expect("42")
        -- history: Up recalls the previous line
        tmux("send-keys -t repl Up Enter")
        local s = expect("wisp> ")
        local deadline = os.time() + 10
        while count(s, "42") < 2 and os.time() <= deadline do sh("sleep 0.1"); s = screen() end
        assert.equal(2, count(s, "\n42"))
        -- line editing: type, move to the start (C-a), insert
        tmux("send-keys -t repl -l '0 + 7'")
        tmux("send-keys -t repl C-a")
        tmux("send-keys -t repl -l '100 + '")
        tmux("send-keys -t repl Enter")
        expect("107")
        -- the preloaded globals
        send("model:num_features()")
        expect("4000")
    end)

    it("runs the ':' commands", function()
        if not have_tmux() then return pending("tmux is not installed") end
        if not H.file_exists(WISP) then return pending("no wisp CLI built") end
        send(":help")
        expect(":placement calibrate")
        send(":devices")
        expect("GPU status:")
        send(":model")
        expect("features:  4000 (f32)")
        send(":placement cpu")
        expect("placement: score on cpu")
        send(":placement")
        expect("score:     cpu")
        send(":bench 500 10")
        expect("10 calls x 500 rows on cpu")
        expect("stages sum to each call's wall time within")
        local s = screen()
        assert.matches("kernel%s+[%d.]+", s)
        assert.matches("overhead%s+[%d.]+", s)
        send(":batcher max_rows=16 max_delay_us=300 preferred=4,8")
        expect("max_rows=16 max_delay_us=300 preferred=4,8 max_queue=4096")
        send(":batcher run 40")
        expect("40 callers, 1 row each")
        send(":placement calibrate quick")
        expect("placement: calibrated (from the next batch)", 60)
        send(":placement save " .. home .. "/p.json")
        expect("saved " .. home .. "/p.json")
        send(":placement load " .. home .. "/p.json")
        send(":trace " .. home .. "/t.json 100 5")
        expect("trace written to " .. home .. "/t.json")
        local doc = require("cjson").decode(H.read_file(home .. "/t.json"))
        assert.is_table(doc.traceEvents)
        send(":stats")
        expect("session statistics")
        send(":nonsense")
        expect("unknown command ':nonsense'")
        send(":batcher max_rows=0")
        expect("bad option max_rows")
    end)
end)

-- The REPL's arguments and counts, through a pipe (no terminal needed).
describe("wisp repl arguments", function()
    after_each(H.cleanup)

    it("says in one line that a model cannot be loaded, and exits 1 (no traceback)", function()
        if not H.file_exists(WISP) then return pending("no wisp CLI built") end
        local missing = H.tmpname(".wisp")
        os.remove(missing)
        local out, rc = H.sh("echo 'print(1)' | " .. WISP .. " repl " .. missing)
        assert.equal(1, rc, out)
        assert.equal("wisp repl: " .. missing .. ": cannot open: No such file or directory\n", out)
        local bad = H.tmpname(".wisp")
        H.write_file(bad, "not a model")
        out, rc = H.sh("echo 'print(1)' | " .. WISP .. " repl " .. bad)
        assert.equal(1, rc, out)
        assert.is_nil(out:find("traceback", 1, true), out)
        assert.truthy(out:find("^wisp repl: " .. bad:gsub("%p", "%%%0") .. ": "), out)
    end)

    it("checks every count before it allocates (:bench, :trace, :batcher run)", function()
        if not H.file_exists(WISP) then return pending("no wisp CLI built") end
        local model = (H.random_model(wisp, 500))
        local cmds = {
            { ":bench 1e12", "rows must be a whole number from 1 to 1000000, got '1e12'" },
            { ":bench 100 1e12", "calls must be a whole number from 1 to 1000000, got '1e12'" },
            { ":bench abc", "rows must be a whole number from 1 to 1000000, got 'abc'" },
            { ":bench 0", "got '0'" }, { ":bench -5", "got '-5'" }, { ":bench 2.5", "got '2.5'" },
            { ":bench nan", "got 'nan'" }, { ":bench inf", "got 'inf'" },
            { ":trace /nonexistent/t.json 1e9", "usage: :trace FILE [ROWS] [CALLS]: rows must be" },
            { ":batcher run 1e12", "usage: :batcher run [CALLERS]: callers must be a whole number from 1 to 100000" },
        }
        local script = {}
        for _, c in ipairs(cmds) do script[#script + 1] = c[1] end
        script[#script + 1] = ":bench 20 2"
        local input = H.tmpname(".txt")
        H.write_file(input, table.concat(script, "\n") .. "\n")
        local out, rc = H.sh(WISP .. " repl " .. model .. " < " .. input)
        assert.equal(0, rc, out)
        for _, c in ipairs(cmds) do assert.truthy(out:find(c[2], 1, true), c[1] .. ": " .. out) end
        assert.truthy(out:find("2 calls x 20 rows on", 1, true), out)   -- valid counts still run
        assert.is_nil(out:find("error:", 1, true), out)
    end)
end)
