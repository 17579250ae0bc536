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

  it("rejects an unknown command with usage and exit status 2", function()
    local out, rc = sh(WISP .. " frobnicate")
    assert.equal(2, rc)
    assert.truthy(out:find("unknown command 'frobnicate'", 1, true))
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
    assert.equal(1, rc)
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
end)
