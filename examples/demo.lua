-- demo.lua — `make demo`: a Criteo-like model and data set from a seed, scored on every device.
--
-- usage: wisp run examples/demo.lua [--out DIR] [--rows N] [--buckets B] [--seed N] [--batch N]
--
-- 1. writes DIR/model.wisp: 13 numeric + 26 hashed categorical columns of B
--    buckets each (13 + 26*B weights, fp32), plus f16 and i8 copies;
-- 2. writes DIR/data.libsvm: N rows, Zipf-distributed categorical ids;
-- 3. scores the file on the CPU and on every usable GPU, in batches, and prints
--    rows/s and the time per stage (parse, host->device, kernel, device->host).
-- Everything is deterministic: the same seed gives the same files, byte for byte.
local wisp = require "wisp"
local synth = require "wisp.synth"
local ffi = require "ffi"

local opts = { out = "build/demo", rows = 200000, buckets = 262144, seed = 42, batch = 65536 }
do
  local i = 1
  while i <= #arg do
    local k, v = arg[i], arg[i + 1]
    if k == "-h" or k == "--help" then
      print("usage: wisp run examples/demo.lua [--out DIR] [--rows N] [--buckets B] [--seed N] [--batch N]")
      os.exit(0)
    end
    local key = k:match("^%-%-(%a+)$")
    if not key or opts[key] == nil or v == nil then
      io.stderr:write("demo: bad argument '", tostring(k), "' (try --help)\n")
      os.exit(2)
    end
    opts[key] = key == "out" and v or tonumber(v)
    if opts[key] == nil then io.stderr:write("demo: ", k, " needs a number\n"); os.exit(2) end
    i = i + 2
  end
end

local now
do -- a monotonic clock: clock_gettime through the FFI
  ffi.cdef [[
    typedef struct { long tv_sec; long tv_nsec; } wisp_demo_timespec;
    int clock_gettime(int clk, wisp_demo_timespec *ts);
  ]]
  local ts = ffi.new("wisp_demo_timespec")
  now = function()
    ffi.C.clock_gettime(1, ts)
    return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
  end
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

os.execute("mkdir -p '" .. opts.out .. "'")
local tag = string.format("%d_%d_%d", opts.rows, opts.buckets, opts.seed)
local model_path = opts.out .. "/model.wisp"
local data_path = string.format("%s/data_%s.libsvm", opts.out, tag)

-- 1. the model ------------------------------------------------------------
local g = synth.criteo { buckets = opts.buckets, seed = opts.seed }
local t0 = now()
local w, bias = g:true_model(opts.seed + 1000)
local ok, err = wisp.write_model(model_path, w, g.num_features, {
  bias = bias,
  meta = { source = "wisp demo (synthetic Criteo-like)", seed = tostring(opts.seed),
           layout = string.format("13 numeric ids 0..12, 26 categorical columns of %d buckets", opts.buckets) },
})
if not ok then io.stderr:write("demo: ", err, "\n") os.exit(1) end
local m = assert(wisp.load(model_path))
for _, dt in ipairs { "f16", "i8" } do assert(m:convert(string.format("%s/model_%s.wisp", opts.out, dt), dt)) end
m:close()
print(string.format("model   %s: %d features (13 numeric + 26 x %d buckets), fp32 %.0f MB, also f16 and i8 (%.1f s)",
  model_path, g.num_features, opts.buckets, g.num_features * 4 / 1e6, now() - t0))

-- 2. the data -------------------------------------------------------------
if not exists(data_path) then
  t0 = now()
  g:write_libsvm(data_path, opts.rows, w, bias, { progress = false })
  print(string.format("data    %s: %d rows x 39 features, Zipf ids (%.1f s)", data_path, opts.rows, now() - t0))
else
  print(string.format("data    %s: %d rows x 39 features, Zipf ids (kept from an earlier run)", data_path, opts.rows))
end
local f = assert(io.open(data_path, "rb"))
local text = f:read("*a")
f:close()

-- 3. score on every device --------------------------------------------------
local eng = wisp.default_engine()
local devices, gpu_status = eng:devices()
if #devices == 1 then print("gpu     none: " .. gpu_status .. " (the CPU scores everything)") end

local results, reference = {}, nil
local function run(device, dtype)
  local path = dtype == "f32" and model_path or string.format("%s/model_%s.wisp", opts.out, dtype)
  local model = assert(wisp.load(path))
  local s = assert(model:session(device))
  local b = wisp.batch()
  local probs = ffi.new("float[?]", opts.rows)
  local sum, nrows, pos, line, parse_s = 0, 0, 0, 0, 0
  local base = ffi.cast("const char *", text)
  local t_start = now()
  while pos < #text do
    b:clear()
    local p0 = now()
    local added, used, nline = assert(b:parse_libsvm(base + pos, #text - pos, { max_rows = opts.batch, line = line }))
    parse_s = parse_s + (now() - p0)
    pos, line = pos + used, nline
    if added == 0 then break end
    assert(s:score(b, probs + nrows))
    nrows = nrows + added
  end
  local wall = now() - t_start
  for i = 0, nrows - 1 do sum = sum + probs[i] end
  local st = s:stats()
  local maxdiff = 0
  if reference then
    for i = 0, nrows - 1 do
      local d = math.abs(probs[i] - reference[i])
      if d > maxdiff then maxdiff = d end
    end
  else
    reference = probs
  end
  results[#results + 1] = {
    device = s:last_device(), dtype = dtype, rows = nrows, rps = nrows / wall, parse = parse_s * 1e3,
    h2d = st.ns_h2d / 1e6, kernel = st.ns_kernel / 1e6, d2h = st.ns_d2h / 1e6,
    other = (st.ns_total - st.ns_h2d - st.ns_kernel - st.ns_d2h) / 1e6, mean = sum / nrows, maxdiff = maxdiff,
  }
  s:close(); b:close(); model:close()
end

for _, dtype in ipairs { "f32", "f16", "i8" } do
  run("cpu", dtype)
  for i = 2, #devices do
    if devices[i].usable then run(devices[i].name, dtype) end
  end
end

print(string.format("\n%-7s %-5s %8s %12s %9s %8s %9s %8s %9s %11s %10s", "device", "dtype", "rows", "rows/s",
  "parse ms", "h2d ms", "kernel ms", "d2h ms", "other ms", "mean prob", "max |dp|"))
for _, r in ipairs(results) do
  print(string.format("%-7s %-5s %8d %12.0f %9.1f %8.2f %9.2f %8.2f %9.2f %11.6f %10.2g", r.device, r.dtype, r.rows,
    r.rps, r.parse, r.h2d, r.kernel, r.d2h, r.other, r.mean, r.maxdiff))
end
print("\nrows/s counts parsing and scoring (the file is in memory); max |dp| is against cpu/f32.")
