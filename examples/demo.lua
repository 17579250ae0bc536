-- demo.lua — `make demo`: every input the README's tour uses, from one seed, then the demo model scored on every device.
--
-- usage: wisp run examples/demo.lua [--out DIR] [--rows N] [--buckets B] [--seed N] [--batch N]
--
-- Writes under DIR (default build/demo), one line per step with its time:
--   model.wisp, model_f16.wisp, model_i8.wisp   13 numeric + 26 hashed categorical columns of B
--                                               buckets each (13 + 26*B weights; fp32, fp16, int8)
--   data.libsvm     N Criteo-like rows for model.wisp (0-based ids, Zipf-distributed)
--   rows.libsvm     the first 4 rows of data.libsvm (a request body for the service)
--   train.libsvm, test.libsvm   20,000 + 5,000 rows with 1-based ids, labels from one hidden
--                   model: what `liblinear-train` reads (LIBLINEAR numbers features from 1)
--   columns.wisp    a model with feature columns (numeric, bucketized, hash bucket, vocabulary,
--                   identity, crosses) written from its column description: no TensorFlow needed
--   rows.jsonl, rows.csv   raw rows for columns.wisp (the last JSON line is bad on purpose)
-- then scores data.libsvm on the CPU and on every usable GPU, in batches, and prints rows/s
-- and the time per stage (parse, host->device, kernel, device->host).
-- Everything but the timings is deterministic: the same seed gives the same files, byte for byte.
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

local function die(msg) io.stderr:write("demo: ", msg, "\n") os.exit(1) end
local t_demo = now()
-- one line per step: what was written, and how long it took
local function step(t0, fmt, ...)
  io.stdout:write(string.format("demo: " .. fmt, ...), string.format(" (%.1f s)\n", now() - t0))
  io.stdout:flush()
end
local function write_file(path, text)
  local f, err = io.open(path, "wb")
  if not f then die(err) end
  f:write(text)
  f:close()
end

if not os.execute("mkdir -p '" .. opts.out .. "'") then die("cannot create " .. opts.out) end
local out = opts.out
local model_path, data_path = out .. "/model.wisp", out .. "/data.libsvm"

-- 1. the demo model -----------------------------------------------------------
local t0 = now()
local g = synth.criteo { buckets = opts.buckets, seed = opts.seed }
local w, bias = g:true_model(opts.seed + 1000)
local ok, err = wisp.write_model(model_path, w, g.num_features, {
  bias = bias,
  meta = { source = "wisp demo (synthetic Criteo-like)", seed = tostring(opts.seed),
           layout = string.format("13 numeric ids 0..12, 26 categorical columns of %d buckets", opts.buckets) },
})
if not ok then die(err) end
do
  local m = assert(wisp.load(model_path))
  for _, dt in ipairs { "f16", "i8" } do assert(m:convert(string.format("%s/model_%s.wisp", out, dt), dt)) end
  m:close()
end
step(t0, "%s: %d features (13 numeric + 26 x %d buckets), fp32 %.0f MB; model_f16.wisp, model_i8.wisp",
  model_path, g.num_features, opts.buckets, g.num_features * 4 / 1e6)

-- 2. its data, and a few rows of it as a request body ---------------------------
t0 = now()
g:write_libsvm(data_path, opts.rows, w, bias, { progress = false })
local f = assert(io.open(data_path, "rb"))
local text = f:read("*a")
f:close()
do
  local head, pos = {}, 1
  for _ = 1, 4 do
    local e = text:find("\n", pos, true)
    if not e then break end
    head[#head + 1] = text:sub(pos, e)
    pos = e + 1
  end
  write_file(out .. "/rows.libsvm", table.concat(head))
end
step(t0, "%s: %d rows x 39 features, Zipf ids; rows.libsvm: its first 4 rows", data_path, opts.rows)

-- 3. LIBLINEAR's input: 1-based ids, train and test rows from one hidden model ---
t0 = now()
do
  local gl = synth.criteo { buckets = 16384, seed = opts.seed + 1 }
  local wl, bl = gl:true_model(opts.seed + 2000)
  -- one generator for both files: the test rows continue its random stream
  gl:write_libsvm(out .. "/train.libsvm", 20000, wl, bl, { one_based = true })
  gl:write_libsvm(out .. "/test.libsvm", 5000, wl, bl, { one_based = true })
end
step(t0, "%s/train.libsvm, test.libsvm: 20000 + 5000 rows over %d features, 1-based ids (for liblinear-train)",
  out, 13 + 26 * 16384)

-- 4. a model with feature columns, and raw rows for it ------------------------------
t0 = now()
local description = [[
{"format":"wisp-columns","version":1,
"inputs":[
{"name":"age","dtype":"float32","default":35},
{"name":"income","dtype":"float32","default":0},
{"name":"city","dtype":"string"},
{"name":"device","dtype":"string"},
{"name":"hour","dtype":"int64"},
{"name":"tags","dtype":"string","sparse":true}
],
"columns":[
{"name":"age","type":"numeric","key":"age","normalizer":{"type":"standard","mean":40,"std":12.5},"offset":0},
{"name":"income","type":"numeric","key":"income","normalizer":{"type":"affine","scale":0.001,"shift":-0.5},"offset":1},
{"name":"age_bucketized","type":"bucketized","source":{"type":"numeric","key":"age"},"boundaries":[18,25,30,35,40,45,50,55,60,65],"offset":2},
{"name":"city","type":"hash_bucket","key":"city","buckets":5000,"offset":13},
{"name":"device","type":"vocabulary_list","key":"device","vocabulary":["ios","android","web"],"num_oov_buckets":2,"offset":5013},
{"name":"hour","type":"identity","key":"hour","buckets":24,"default_value":0,"offset":5018},
{"name":"tags","type":"hash_bucket","key":"tags","buckets":64,"offset":5042},
{"name":"age_bucketized_X_city","type":"crossed","keys":["city",{"type":"bucketized","source":{"type":"numeric","key":"age"},"boundaries":[18,25,30,35,40,45,50,55,60,65]}],"buckets":20000,"offset":5106},
{"name":"device_X_hour","type":"crossed","keys":["device","hour"],"buckets":500,"offset":25106},
{"name":"city_X_tags","type":"crossed","keys":["tags","city"],"buckets":30000,"offset":25606}
],
"num_features":55606}
]]
do
  local n, rng = 55606, synth.rng(opts.seed + 3000)
  local cw = ffi.new("float[?]", n)
  for i = 0, n - 1 do cw[i] = rng:normal() * 0.5 end
  ok, err = wisp.write_model(out .. "/columns.wisp", cw, n, {
    bias = -1.0, columns = description,
    meta = { source = "wisp demo (feature columns, random weights)", seed = tostring(opts.seed) },
  })
  if not ok then die(err) end
end
write_file(out .. "/rows.jsonl", table.concat({
  '{"age": 23, "income": 1800, "city": "c00042", "device": "ios", "hour": 9, "tags": ["t1", "t7"]}',
  '{"age": 51.5, "income": 5200, "city": "c00007", "device": "web", "hour": 22}',
  '{"age": 38, "city": "new4711", "device": "tv", "hour": 13, "tags": "t3"}',
  '{"income": 990, "city": "", "device": "android", "hour": 0, "tags": []}',
  '{"age": "forty", "city": "c00042", "device": "ios", "hour": 9}',
}, "\n") .. "\n")
write_file(out .. "/rows.csv", table.concat({
  "age,income,city,device,hour,tags",
  "23,1800,c00042,ios,9,t1",
  "51.5,5200,c00007,web,22,",
  "38,,new4711,tv,13,t3",
}, "\n") .. "\n")
step(t0, "%s/columns.wisp: 10 feature columns over 55606 features; rows.jsonl (5 rows, 1 bad), rows.csv (3 rows)", out)

-- 5. score data.libsvm on every device ----------------------------------------------
local eng = wisp.default_engine()
local devices, gpu_status = eng:devices()
if #devices == 1 then
  io.stdout:write("demo: no GPU: ", gpu_status, " (the CPU scores everything)\n")
end

local results, reference = {}, nil
local function run(device, dtype)
  local path = dtype == "f32" and model_path or string.format("%s/model_%s.wisp", out, dtype)
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
  t0 = now()
  run("cpu", dtype)
  for i = 2, #devices do
    if devices[i].usable then run(devices[i].name, dtype) end
  end
  step(t0, "scored %s with %s weights on %s", data_path, dtype, #devices == 1 and "the CPU" or "every device")
end

print(string.format("\n%-7s %-5s %8s %12s %9s %8s %9s %8s %9s %11s %10s", "device", "dtype", "rows", "rows/s",
  "parse ms", "h2d ms", "kernel ms", "d2h ms", "other ms", "mean prob", "max |dp|"))
for _, r in ipairs(results) do
  print(string.format("%-7s %-5s %8d %12.0f %9.1f %8.2f %9.2f %8.2f %9.2f %11.6f %10.2g", r.device, r.dtype, r.rows,
    r.rps, r.parse, r.h2d, r.kernel, r.d2h, r.other, r.mean, r.maxdiff))
end
print("\nrows/s counts parsing and scoring (the file is in memory); max |dp| is against cpu/f32.")
print(string.format("demo: done in %.1f s; the README's tour runs on the files in %s", now() - t_demo, out))
