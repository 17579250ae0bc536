-- bench_cli_raw.lua — `wisp score --format tsv` (raw Criteo TSV: parse + transform + score) against `wisp score` on the same rows as libsvm ids (parse + score), side by side.
--   build/wisp run scripts/bench/bench_cli_raw.lua [--rows 200000] [--repeat 5] [--label dev-2core] [--threads N] [--device cpu]
-- Writes build/results/bench_cli_raw-<label>.json (scripts/results/ with --record or WISP_RECORD=1). The libsvm file holds the ids and values
-- that the columns make of the TSV rows (wisp_transform), so both commands print the same scores
-- (checked: the outputs are compared byte for byte).
local wisp = require "wisp"
local fc = require "wisp.columns"
local ffi = require "ffi"
local C = require "wisp.cdef"

-- the commit, the machine, where to write (build/results/ unless --record or WISP_RECORD=1)
local R = dofile(((arg[0] or "scripts/bench/bench_cli_raw.lua"):match("^(.*)/[^/]*$") or ".") .. "/../lib/record.lua")
local RECORD = R.take_record_flag(arg)
local opts = { rows = 200000, ["repeat"] = 5, label = "dev", threads = "", device = "cpu" }
do
    local i = 1
    while i <= #arg do
        local k = arg[i]:match("^%-%-(.+)$")
        if not k or opts[k] == nil then error("unknown argument " .. arg[i]) end
        opts[k] = tonumber(arg[i + 1]) or arg[i + 1]
        i = i + 2
    end
end
local build = os.getenv("WISP_BUILD") or "build"
local WISP = build .. "/wisp"
local dir = build .. "/bench_cli_raw"
os.execute("mkdir -p " .. dir)

-- the Criteo layout: I1..I13 bucketized (and numeric), C1..C26 hashed, adjacent crosses
local cols = {}
for k = 1, 13 do cols[#cols + 1] = fc.input("I" .. k, "float32", { default = 0 }) end
for k = 1, 13 do
    cols[#cols + 1] = fc.numeric("I" .. k, { normalizer = { type = "standard", mean = 10, std = 30 } })
    cols[#cols + 1] = fc.bucketized(fc.numeric("I" .. k), { 0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024 })
end
for k = 1, 26 do cols[#cols + 1] = fc.hash_bucket("C" .. k, 262144) end
for k = 1, 25 do cols[#cols + 1] = fc.crossed({ "C" .. k, "C" .. (k + 1) }, 262144) end
local spec = assert(fc.spec(cols))
local model = dir .. "/criteo_cols.wisp"
local tsv, svm = dir .. ("/criteo_%d.tsv"):format(opts.rows), dir .. ("/criteo_%d.libsvm"):format(opts.rows)

local function gen()
    local t = assert(spec:transformer())
    local n = spec:num_features()
    local w = ffi.new("float[?]", n)
    local x = 12345
    local function rnd() x = (x * 1103515245 + 12345) % 2147483648; return x end
    for i = 0, n - 1 do w[i] = (rnd() % 2001 - 1000) / 20000 end
    assert(wisp.write_model(model, w, n, { bias = -1.2, columns = spec:json() }))
    local f = assert(io.open(tsv, "wb"))
    local buf = {}
    for r = 1, opts.rows do
        local fl = { tostring(rnd() % 2) }
        for k = 1, 13 do fl[#fl + 1] = rnd() % 7 == 0 and "" or tostring(math.floor(2 ^ ((rnd() % 1100) / 100)) - 1) end
        for k = 1, 26 do
            -- Zipf-ish categories: small ranks most often
            local rank = math.floor(1 / ((rnd() % 100000) / 100000 + 1e-5))
            fl[#fl + 1] = rnd() % 20 == 0 and "" or ("%08x"):format((rank * 2654435761 + k * 40503) % 4294967296)
        end
        buf[#buf + 1] = table.concat(fl, "\t")
        if #buf == 10000 then f:write(table.concat(buf, "\n"), "\n"); buf = {} end
    end
    if #buf > 0 then f:write(table.concat(buf, "\n"), "\n") end
    f:close()
    -- the same rows as libsvm: the CPU transform's ids and values
    local text = assert(io.open(tsv, "rb")):read("*a")
    assert(t:parse_tsv(text, { schema = "criteo" }))
    local b = assert(t:transform())
    local rp, ids = C.wisp_batch_indptr(b._h), C.wisp_batch_ids(b._h)
    local vp, vals = C.wisp_batch_val_ptr(b._h), C.wisp_batch_vals(b._h)
    local o = assert(io.open(svm, "wb"))
    local lines = {}
    for r = 0, tonumber(C.wisp_batch_rows(b._h)) - 1 do
        local l = { "0" }
        local a, z = rp[r], rp[r + 1]
        local nv = vp ~= nil and (vp[r + 1] - vp[r]) or (vals ~= nil and z - a or 0)
        local v0 = vp ~= nil and vp[r] or a
        for k = a, z - 1 do
            if k - a < nv then l[#l + 1] = ("%d:%.9g"):format(ids[k], vals[v0 + (k - a)])
            else l[#l + 1] = tostring(ids[k]) end
        end
        lines[#lines + 1] = table.concat(l, " ")
        if #lines == 10000 then o:write(table.concat(lines, "\n"), "\n"); lines = {} end
    end
    if #lines > 0 then o:write(table.concat(lines, "\n"), "\n") end
    o:close()
end

local function exists(p) local f = io.open(p, "rb"); if f then f:close() end; return f ~= nil end
if not (exists(model) and exists(tsv) and exists(svm)) then
    io.stderr:write("bench_cli_raw: generating ", tsv, " and ", svm, "\n")
    gen()
end

local function size(p) local f = assert(io.open(p, "rb")); local n = f:seek("end"); f:close(); return n end
local thr = opts.threads ~= "" and (" --threads " .. opts.threads) or ""
local cmds = {
    tsv = ("%s score -m %s -d %s%s --format tsv --schema criteo --stats %s -o %s/out_tsv.txt"):format(WISP, model, opts.device, thr, tsv, dir),
    libsvm = ("%s score -m %s -d %s%s --format libsvm --stats %s -o %s/out_svm.txt"):format(WISP, model, opts.device, thr, svm, dir),
}
local function run(cmd)
    local p = assert(io.popen(cmd .. " 2>&1"))
    local out = p:read("*a")
    p:close()
    local rows, secs, rps = out:match("(%d+) rows in ([%d.]+) s %((%d+) rows/s%)")
    assert(rows, cmd .. ": " .. out)
    return tonumber(secs), tonumber(rps), out
end
local res = { tsv = {}, libsvm = {} }
local last = {}
for _ = 1, opts["repeat"] do
    for _, k in ipairs { "tsv", "libsvm" } do              -- taking turns: both see the same load
        local s, _, out = run(cmds[k])
        res[k][#res[k] + 1] = s
        last[k] = out
    end
end
local function median(t) table.sort(t); return t[math.ceil(#t / 2)] end
local same = io.open(dir .. "/out_tsv.txt", "rb"):read("*a") == io.open(dir .. "/out_svm.txt", "rb"):read("*a")
local mt, ml = median(res.tsv), median(res.libsvm)
local function sh1(c) local p = io.popen(c); local s = p:read("*a"); p:close(); return (s:gsub("%s+$", "")) end
local report = {
    machine_detail = { hostname = sh1("hostname"), wisp_devices = sh1(WISP .. " devices | grep '^gpu'") }, commit = R.commit(),
    date = os.date("!%Y-%m-%dT%H:%M:%SZ"), command = "build/wisp run scripts/bench/bench_cli_raw.lua " .. table.concat(arg, " "),
    rows = opts.rows, tsv_bytes = size(tsv), libsvm_bytes = size(svm), columns = spec:count(),
    peers = { tsv = { command = cmds.tsv, seconds = res.tsv, median_s = mt, rows_per_s = opts.rows / mt, stats = last.tsv },
              libsvm = { command = cmds.libsvm, seconds = res.libsvm, median_s = ml, rows_per_s = opts.rows / ml, stats = last.libsvm } },
    tsv_over_libsvm_time = mt / ml, outputs_identical = same,
    note = "shared machine: timings noisy; the two commands take turns",
}
local path = R.out_path(("bench_cli_raw-%s.json"):format(opts.label), RECORD)
R.write(path, report)
print(("tsv (parse+transform+score): %.3f s median, %.0f rows/s   (%d bytes)"):format(mt, opts.rows / mt, size(tsv)))
print(("libsvm (parse+score):        %.3f s median, %.0f rows/s   (%d bytes)"):format(ml, opts.rows / ml, size(svm)))
print(("tsv/libsvm time: %.2fx; outputs identical: %s; -> %s"):format(mt / ml, tostring(same), path))
io.write(last.tsv, last.libsvm)
