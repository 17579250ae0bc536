-- cli_spec.lua — the `wisp` command end to end: score, import, convert, info, devices, run, repl, errors.
local wisp = require "wisp"
local H = require "helpers"

local build = os.getenv("WISP_BUILD") or "build"
local WISP = build .. "/wisp"

local sh = H.sh

local write = H.write_file

local lines = H.lines

local sigmoid = function(z) return 1 / (1 + math.exp(-z)) end

describe("wisp CLI", function()
  local dir, model
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0 or true)
    model = dir .. "/m.wisp"
    -- w[id] = id / 10 for ids 0..9, bias 0.5
    local w = {}
    for i = 1, 10 do w[i] = (i - 1) / 10 end
    assert(wisp.write_model(model, w, { bias = 0.5, meta = { source = "cli_spec" } }))
  end)
  teardown(function() os.execute("rm -rf " .. dir) end)

  it("prints help for every command and the version", function()
    for _, cmd in ipairs { "", "score", "import", "convert", "info", "devices", "run", "repl" } do
      local out, rc = sh(WISP .. " " .. cmd .. " --help")
      assert.equal(0, rc, cmd .. ": " .. out)
      assert.truthy(out:find("usage: wisp", 1, true), cmd)
    end
    -- the main help lists the environment variables the engine reads
    local help = sh(WISP .. " --help")
    for _, var in ipairs { "WISP_LOG", "WISP_NO_GPU", "WISP_PINNED_MAX_MB", "WISP_GPU_TABLE_MB", "WISP_GPU_SHARDING" } do
      assert.truthy(help:find(var, 1, true), var)
    end
    local out, rc = sh(WISP .. " --version")
    assert.equal(0, rc)
    assert.truthy(out:find(wisp.version(), 1, true))
  end)

  it("rejects an unknown command in one line and exit status 2", function()
    local out, rc = sh(WISP .. " frobnicate")
    assert.equal(2, rc)
    assert.truthy(out:find("unknown command 'frobnicate'", 1, true))
    assert.equal("wisp: unknown command 'frobnicate' (score, import, convert, info, devices, run, repl)\n"
                 .. "try 'wisp --help'\n", out)
  end)

  -- issue 19, the newcomer's first hour: a usage error is one line naming the command
  -- once, then a pointer to its --help (not 40 lines of usage), and exits 2
  it("says a usage error in one line plus \"try 'wisp CMD --help'\", exit status 2", function()
    local cases = {
      { "score", "wisp score: -m MODEL is required" },
      { "score -m " .. model .. " --device tpu /dev/null",
        "wisp score: unknown device 'tpu' (use cpu, gpu, gpu:N, gpus, gpus:N or auto)" },
      { "score -m " .. model .. " --bogus", "wisp score: unknown option '--bogus'" },
      { "score -m", "wisp score: option '-m' needs a value" },
      { "score -m " .. model .. " --format xml",
        "wisp score: unknown --format 'xml' (supported: auto, libsvm, vw, tsv, csv, jsonl)" },
      { "score -m " .. model .. " a b", "wisp score: one input file at most (got 2)" },
      { "import", "wisp import: expected KIND MODEL OUT.wisp (got 0 arguments)" },
      { "import foo a b", "wisp import: unknown model kind 'foo' (supported: liblinear, vw, onnx)" },
      { "import liblinear a b --dtype f64", "wisp import: unknown dtype 'f64' (use f32, f16 or i8)" },
      { "convert a b", "wisp convert: --dtype f32|f16|i8 is required" },
      { "info", "wisp info: expected one MODEL (got 0 arguments)" },
      { "run", "wisp run: a SCRIPT.lua is required" },
      { "repl a b", "wisp repl: one MODEL at most (got 2)" },
    }
    for _, c in ipairs(cases) do
      local out, rc = sh(WISP .. " " .. c[1] .. " </dev/null")
      assert.equal(2, rc, c[1] .. ": " .. out)
      local cmd = c[1]:match("^%S+")
      assert.equal(c[2] .. "\ntry 'wisp " .. cmd .. " --help'\n", out, c[1])
      assert.falsy(out:find("usage:", 1, true), c[1])
      assert.falsy(out:find("wisp " .. cmd .. ": " .. cmd .. ":", 1, true), c[1])   -- no doubled prefix
    end
    -- a runtime error (not a usage error) names the command once too, and exits 1
    local out, rc = sh(WISP .. " score -m " .. dir .. "/nope.wisp /dev/null")
    assert.equal(1, rc)
    assert.truthy(out:find("^wisp score: "), out)
    assert.falsy(out:find("wisp score: score:", 1, true), out)
  end)

  it("scores libsvm rows from a file and from stdin, one probability per line", function()
    local input = dir .. "/in.txt"
    write(input, "1 1:1 2:0.5\n# a comment\n\n-1 3 9:2\n0 10:1 11:1\n")
    local out, rc = sh(WISP .. " score -m " .. model .. " --device cpu " .. input)
    assert.equal(0, rc, out)
    local l = lines(out)
    assert.equal(3, #l)
    assert.near(sigmoid(0.5 + 0.1 + 0.5 * 0.2), tonumber(l[1]), 1e-6)
    assert.near(sigmoid(0.5 + 0.3 + 0.9 * 2), tonumber(l[2]), 1e-6)
    assert.near(sigmoid(0.5), tonumber(l[3]), 1e-6)      -- ids beyond the model are ignored
    local out2 = sh("cat " .. input .. " | " .. WISP .. " score -m " .. model .. " -d cpu -b 1 -")
    assert.equal(out, out2)
  end)

  it("reports a malformed line with FILE:LINE, prints nan in its place and exits 1", function()
    local input = dir .. "/bad.txt"
    write(input, "1 1:1\n1 2:abc\n1 3:1\n1 99999999999999999999999:1\n")
    local out, rc = sh(WISP .. " score -m " .. model .. " -d cpu " .. input .. " 2>" .. dir .. "/err.txt")
    assert.equal(1, rc)
    local l = lines(out)
    assert.equal(4, #l)
    assert.equal("nan", l[2])
    assert.equal("nan", l[4])
    assert.near(sigmoid(0.5 + 0.3), tonumber(l[3]), 1e-6)
    local f = io.open(dir .. "/err.txt"); local err = f:read("*a"); f:close()
    assert.truthy(err:find(input .. ":2: ", 1, true), err)
    assert.truthy(err:find(input .. ":4: ", 1, true), err)
    assert.truthy(err:find("overflows 64 bits", 1, true), err)
    assert.truthy(err:find("2 malformed lines", 1, true), err)
  end)

  it("says which file is missing or broken", function()
    local out, rc = sh(WISP .. " score -m " .. dir .. "/nope.wisp " .. dir .. "/in.txt")
    assert.equal(1, rc)
    assert.truthy(out:find(dir .. "/nope.wisp", 1, true), out)
    write(dir .. "/junk.wisp", "this is not a model file at all, not even close............................")
    out, rc = sh(WISP .. " info " .. dir .. "/junk.wisp")
    assert.equal(1, rc)
    assert.truthy(out:find("junk.wisp", 1, true), out)
    out, rc = sh(WISP .. " score -m " .. model .. " " .. dir .. "/missing.txt")
    assert.equal(1, rc)
    assert.truthy(out:find("missing.txt: cannot open", 1, true), out)
    out, rc = sh(WISP .. " score -m " .. model .. " --device tpu " .. dir .. "/in.txt")
    assert.equal(2, rc)   -- a misspelt device is a usage error like the others (issue 19)
    assert.truthy(out:find("unknown device 'tpu'", 1, true), out)
    out, rc = sh(WISP .. " score -m " .. model .. " --batch 0 " .. dir .. "/in.txt")
    assert.equal(2, rc)   -- usage errors exit 2
    assert.truthy(out:find("bad --batch", 1, true), out)
  end)

  it("falls back to the CPU and says so when no GPU is usable", function()
    -- ask the CLI itself: the library this spec loads may be another build (the ASan pass
    -- loads one without CUDA), whose reason for having no GPU reads differently
    local out = sh(WISP .. " devices")
    if not out:find("gpu      none: ", 1, true) then pending("this machine has a GPU") return end
    local status = out:match("gpu      none: ([^\n]+)")
    assert.truthy(status and #status > 0, out)
    write(dir .. "/one.txt", "1 1:1\n")
    local rc
    out, rc = sh(WISP .. " score -m " .. model .. " --device gpu " .. dir .. "/one.txt")
    assert.equal(0, rc, out)
    assert.truthy(out:find("scoring runs on the CPU", 1, true), out)
    assert.truthy(out:find(status, 1, true), out)
  end)

  it("converts dtypes and describes models", function()
    for _, dt in ipairs { "f16", "i8", "f32" } do
      local dst = dir .. "/m_" .. dt .. ".wisp"
      local out, rc = sh(WISP .. " convert " .. model .. " " .. dst .. " --dtype " .. dt)
      assert.equal(0, rc, out)
      out, rc = sh(WISP .. " info " .. dst)
      assert.equal(0, rc, out)
      assert.truthy(out:find("dtype:      " .. dt, 1, true), out)
      assert.truthy(out:find("features:   10", 1, true), out)
      assert.truthy(out:find("source=cli_spec", 1, true), out)
    end
    local out, rc = sh(WISP .. " convert " .. model .. " " .. dir .. "/x.wisp --dtype f64")
    assert.equal(2, rc)
    assert.truthy(out:find("unknown dtype 'f64'", 1, true), out)
  end)

  it("imports a LIBLINEAR model and scores the first label's probability", function()
    local txt = dir .. "/ll.model"
    write(txt, "solver_type L2R_LR\nnr_class 2\nlabel 1 -1\nnr_feature 3\nbias 1\nw\n0.5 \n-0.25 \n1 \n-0.75 \n")
    local dst = dir .. "/ll.wisp"
    local out, rc = sh(WISP .. " import liblinear " .. txt .. " " .. dst)
    assert.equal(0, rc, out)
    write(dir .. "/ll.txt", "1 1:2 3:1\n")
    out, rc = sh(WISP .. " score -m " .. dst .. " -d cpu " .. dir .. "/ll.txt")
    assert.equal(0, rc, out)
    assert.near(sigmoid(0.5 * 2 + 1 - 0.75), tonumber(out), 1e-6)
    write(txt, "solver_type L2R_L2LOSS_SVC\nnr_class 2\nlabel 1 -1\nnr_feature 1\nbias -1\nw\n0.5\n")
    out, rc = sh(WISP .. " import liblinear " .. txt .. " " .. dst)
    assert.equal(1, rc)
    assert.truthy(out:find("L2R_L2LOSS_SVC", 1, true), out)
  end)

  it("runs Lua scripts with the wisp module and passes their arguments", function()
    local script = dir .. "/s.lua"
    write(script, "local wisp = require 'wisp'\nprint(wisp.version(), arg[0] ~= nil, ...)\n")
    local out, rc = sh(WISP .. " run " .. script .. " a b")
    assert.equal(0, rc, out)
    assert.equal(wisp.version() .. "\ttrue\ta\tb\n", out)
    write(script, "error('boom')\n")
    out, rc = sh(WISP .. " run " .. script)
    assert.equal(1, rc)
    assert.truthy(out:find("boom", 1, true), out)
  end)

  it("has a REPL that evaluates expressions with the model preloaded", function()
    local out, rc = sh("printf 'return 1 + 2\\nmodel:num_features()\\nx = 5\\nx * 2\\n' | " .. WISP .. " repl " .. model)
    assert.equal(0, rc, out)
    local l = lines(out)
    assert.same({ "3", "10", "10" }, l)
  end)

  it("has a REPL that reads on when a statement is unfinished, as luajit's does", function()
    -- a loop, a function with a blank line inside, a table constructor over three lines
    local input = "for i = 1, 2 do\n  print(i)\nend\nfunction f(x)\n\n  return x * 2\nend\nf(21)\n"
               .. "t = {\n1, 2,\n3}\n#t\n"
    local out, rc = sh("printf '" .. input .. "' | " .. WISP .. " repl " .. model)
    assert.equal(0, rc, out)
    assert.same({ "1", "2", "42", "3" }, lines(out))
    -- a real syntax error is reported at once; the next statement still runs
    out = sh("printf 'x = = 1\nreturn 7\n' | " .. WISP .. " repl " .. model)
    assert.truthy(out:find("unexpected symbol", 1, true), out)
    assert.truthy(out:find("\n7\n", 1, true) or out:find("^7\n"), out)
    -- the input ends mid-statement: luajit's '<eof>' message, not silence
    out = sh("printf 'if true then\n' | " .. WISP .. " repl " .. model)
    assert.truthy(out:find("'end' expected", 1, true) and out:find("<eof>", 1, true), out)
  end)
end)

-- Outputs that are not regular files or that are an input, lost writes, and inputs
-- truncated while they are read (issue 14, classes 2 and 4).
describe("wisp CLI outputs and changing inputs", function()
  local dir, model, input, big
  local BIG_ROWS = 60000
  setup(function()
    dir = os.tmpname()
    os.remove(dir)
    assert(os.execute("mkdir -p " .. dir) == 0 or true)
    model = dir .. "/m.wisp"
    local w = {}
    for i = 1, 10 do w[i] = (i - 1) / 10 end
    assert(wisp.write_model(model, w, { bias = 0.5 }))
    input = dir .. "/in.txt"
    write(input, "1 1:1 2:0.5\n0 3 9:2\n")
    big = dir .. "/big.txt"                  -- output larger than a pipe's buffer
    write(big, string.rep("1 1:1 2:0.5\n", BIG_ROWS))
  end)
  teardown(function() os.execute("rm -rf " .. dir) end)

  local function sum(path) return (sh("cksum < " .. path)) end
  local function kind(path) return (sh("stat -c %F " .. path):gsub("%s+$", "")) end

  it("writes through a symbolic link to its target and keeps the link", function()
    for _, cmd in ipairs {
      "score -m " .. model .. " -d cpu " .. input .. " -o %s",
      "convert " .. model .. " %s --dtype f16",
    } do
      os.remove(dir .. "/target"); os.remove(dir .. "/link")
      assert(os.execute("ln -s target " .. dir .. "/link") == 0)
      local out, rc = sh(WISP .. " " .. cmd:format(dir .. "/link"))
      assert.equal(0, rc, out)
      assert.equal("symbolic link", kind(dir .. "/link"))
      assert.equal("regular file", kind(dir .. "/target"))
    end
    local m = assert(wisp.load(dir .. "/link"))
    assert.equal("f16", m:dtype())
  end)

  it("writes character devices and FIFOs directly, never replacing the node", function()
    -- a node of our own where we may make one (as root: a wisp that replaced its output by
    -- rename would otherwise replace the system's /dev/null); else /dev/null itself
    local null = dir .. "/null"
    local _, mk = sh("mknod -m 666 " .. null .. " c 1 3")
    if mk ~= 0 or kind(null) ~= "character special file" then null = "/dev/null" end
    local out, rc = sh(WISP .. " convert " .. model .. " " .. null .. " --dtype i8")
    assert.equal(0, rc, out)
    assert.equal("character special file", kind(null))
    out, rc = sh(WISP .. " score -m " .. model .. " -d cpu " .. input .. " -o " .. null)
    assert.equal(0, rc, out)
    assert.equal("character special file", kind(null))
    local fifo = dir .. "/fifo"
    assert(os.execute("mkfifo " .. fifo) == 0)
    out, rc = sh("cat " .. fifo .. " > " .. dir .. "/from_fifo & " .. WISP .. " convert " .. model .. " " .. fifo ..
                 " --dtype f16; rc=$?; wait; exit $rc")
    assert.equal(0, rc, out)
    assert.equal("fifo", kind(fifo))
    local m = assert(wisp.load(dir .. "/from_fifo"))
    assert.equal("f16", m:dtype())
    assert.equal(10, m:num_features())
  end)

  it("refuses an output that is a directory or an input of the same command (exit 2, input intact)", function()
    local before, before_in = sum(model), sum(input)
    assert(os.execute("ln -sf m.wisp " .. dir .. "/mlink.wisp && ln -f " .. model .. " " .. dir .. "/mhard.wisp") == 0)
    for _, c in ipairs {
      { "convert " .. model .. " " .. model .. " --dtype f16", "is the same file as the input" },
      { "convert " .. model .. " " .. dir .. "/mlink.wisp --dtype f16", "is the same file as the input" },
      { "convert " .. dir .. "/mlink.wisp " .. dir .. "/mhard.wisp --dtype f16", "is the same file as the input" },
      { "convert " .. model .. " " .. dir .. " --dtype f16", "is a directory" },
      { "import liblinear " .. input .. " " .. input, "is the same file as the input" },
      { "import vw " .. input .. " " .. dir .. "/mlink.wisp", nil },   -- not the same file: an import error (1)
      { "score -m " .. model .. " " .. input .. " -o " .. input, "is the same file as the input" },
      { "score -m " .. model .. " " .. input .. " -o " .. dir .. "/mhard.wisp", "is the same file as the input" },
      { "score -m " .. model .. " " .. input .. " >> " .. input, "(standard output) is the same file as the input" },
      { "score -m " .. model .. " -o " .. input .. " < " .. input, "is the same file as the input <stdin>" },
      { "score -m " .. model .. " " .. input .. " -o " .. dir, "is a directory" },
    } do
      local out, rc = sh(WISP .. " " .. c[1])
      if c[2] then
        assert.equal(2, rc, c[1] .. ": " .. out)
        assert.truthy(out:find(c[2], 1, true), c[1] .. ": " .. out)
      else
        assert.equal(1, rc, c[1] .. ": " .. out)
      end
      assert.equal(before, sum(model), c[1])
      assert.equal(before_in, sum(input), c[1])
    end
  end)

  it("makes every lost write an error: /dev/full, a closed stdout, a reader that quits", function()
    local full = dir .. "/full"             -- our own node where we may make one (see above)
    local _, mk = sh("mknod -m 666 " .. full .. " c 1 7")
    if mk ~= 0 or kind(full) ~= "character special file" then full = "/dev/full" end
    for _, c in ipairs {
      { "score -m " .. model .. " -d cpu " .. input .. " > /dev/full", "No space left on device" },
      { "score -m " .. model .. " -d cpu " .. input .. " -o " .. full, "No space left on device" },
      { "info " .. model .. " > /dev/full", "No space left on device" },
      { "devices > /dev/full", "No space left on device" },
      { "convert " .. model .. " " .. full .. " --dtype f16", "No space left on device" },
      { "score -m " .. model .. " -d cpu " .. input .. " >&-", "Bad file descriptor" },
      { "info " .. model .. " >&-", "Bad file descriptor" },
    } do
      local out, rc = sh(WISP .. " " .. c[1])
      assert.equal(1, rc, c[1] .. ": " .. out)
      assert.truthy(out:find(c[2], 1, true), c[1] .. ": " .. out)
    end
    -- a reader that quits early: killed by SIGPIPE as filters are (141), or, with
    -- SIGPIPE ignored by the caller, "Broken pipe" and exit status 1; never 0
    local cmd = WISP .. " score -m " .. model .. " -d cpu " .. big .. " | head -1 > /dev/null; echo st=${PIPESTATUS[0]}"
    local out = sh("bash -c '" .. cmd .. "'")
    assert.truthy(out:find("st=141", 1, true), out)
    out = sh("bash -c \"trap '' PIPE; " .. cmd:gsub("%$", "\\$") .. "\"")
    assert.truthy(out:find("st=1\n", 1, true), out)
    assert.truthy(out:find("Broken pipe", 1, true), out)
  end)

  it("never dies of a signal when its input is truncated while it is read", function()
    local one = sigmoid(0.5 + 0.1 + 0.5 * 0.2)
    local rows_at_cut = BIG_ROWS / 4        -- the cut lands on a line end
    local cut_bytes = rows_at_cut * #"1 1:1 2:0.5\n"
    local victim = dir .. "/victim.txt"
    local seen = {}
    for _, delay in ipairs { "0", "0.005", "0.01", "0.02", "0.04", "0.08" } do
      sh("cp " .. big .. " " .. victim)
      local out, rc = sh("(sleep " .. delay .. "; truncate -s " .. cut_bytes .. " " .. victim .. ") & " .. WISP ..
                         " score -m " .. model .. " -d cpu -b 512 " .. victim .. " -o " .. dir .. "/probs; rc=$?; wait; exit $rc")
      assert.is_true(rc == 0 or rc == 1, "exit status " .. tostring(rc) .. " (a signal?): " .. out)
      if rc == 1 then
        assert.truthy(out:find("changed while being read", 1, true), out)
        seen.refused = true
      else
        -- the whole file was read before the cut, or the cut came before the open
        local probs = lines(H.read_file(dir .. "/probs"))
        assert.is_true(#probs == BIG_ROWS or #probs == rows_at_cut, #probs .. " rows")
        for i = 1, #probs, 997 do assert.near(one, tonumber(probs[i]), 1e-6) end
        seen[#probs] = true
      end
    end
    print(string.format("  truncated input: refused mid-read %s, whole file %s, cut before open %s",
                        tostring(seen.refused or false), tostring(seen[BIG_ROWS] or false),
                        tostring(seen[rows_at_cut] or false)))
  end)

  it("refuses a model truncated or rewritten while wisp info / convert load it, with a message", function()
    local copy = dir .. "/trunc.wisp"
    sh("cp " .. model .. " " .. copy .. " && truncate -s 100 " .. copy)
    for _, cmd in ipairs { "info " .. copy, "convert " .. copy .. " " .. dir .. "/c.wisp --dtype f16",
                           "score -m " .. copy .. " " .. input } do
      local out, rc = sh(WISP .. " " .. cmd)
      assert.equal(1, rc, cmd .. ": " .. out)
      assert.truthy(out:find("trunc.wisp", 1, true), out)
    end
  end)
end)
