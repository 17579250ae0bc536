-- bench_cpu.lua — in-process CPU scoring of prebuilt batches (rows/s per batch size and thread count), scipy's CSR mat-vec side by side.
--
-- usage: build/wisp run scripts/bench/bench_cpu.lua [--quick] [--threads 1,2,4] [--sizes 10,1k,200k,1M]
--            [--dists uniform,zipf] [--hugepages both|on|off] [--pool ROWS] [--repeats N]
--            [--min-ms MS] [--peer-rows ROWS] [--no-peer] [--label NAME] [--out FILE.json]
--   default (full): sizes 10,100,1k,10k,100k,200k,1M; threads 1,2,4,... up to the engine's
--     core count (powers of two plus the max); huge pages off and on; pool 4M rows;
--     5 repeats of >= 40 ms; peer on the first 1M rows. ~70 s on the 2-core dev VM.
--   --quick (smoke test, < 20 s): sizes 10,1k,10k,200k; pool 400k rows; 3 repeats of >= 10 ms.
--   Sizes and row counts take k/M suffixes. --label defaults to the host name.
--
-- What is measured: session:score(batch, out) on the CPU for zero-copy batches
-- (wisp.batch_from_ffi) of 39 features a row, 13 valued + 26 binary (the mixed value
-- mode: val_ptr with 13 values a row), against a model of 2^26 random fp32 weights.
-- All 39 ids of a row are drawn over the whole table, uniform (worst case) or Zipf
-- (s = 1.05 over the 2^26 ids, hot ids scattered by an odd multiplier: realistic).
-- The rows live in one pool per distribution (--pool rows: 4M rows are ~860 MB, far
-- beyond the caches; anonymous memory with MADV_HUGEPAGE, as numpy gives the peer);
-- a batch of B rows is a window [k*B, (k+1)*B) of the pool, k < min(pool/B, 4096), and
-- the timing rotates through the windows so neither the batch data nor the weights it
-- touches stay cached between calls. The windows share one indptr/val_ptr array
-- (every row has the same shape); their ids and values are distinct.
-- For each (distribution, huge pages, threads, size): a warm-up pass, then --repeats
-- passes of at least --min-ms each; the median per-batch time gives rows/s and ns per
-- feature (wall time / (rows * 39)). Huge pages: the model loaded with
-- {hugepages = true} (WISP_LOAD_HUGEPAGES: weights copied to THP-backed memory) or not
-- (weights read through the file's mapping, 4 KiB pages).
-- Correctness: every loaded model first scores 2 x 4096 sample rows of each pool,
-- checked against a float64 reference computed here (the run stops beyond 1e-5).
-- Peer: the weights and the first --peer-rows rows of each pool go to a temporary
-- directory (/dev/shm when possible) as raw arrays, and scripts/bench/bench_scipy_peer.py
-- times scipy's A @ w + sigmoid on one thread over the same windows of those rows, and
-- checks its probabilities against wisp's on the first 200k rows. Missing python3 or
-- scipy is recorded as "unavailable" with the reason, not an error.
-- Output: build/results/bench_cpu_<label>.json (scripts/results/ with --record or WISP_RECORD=1) (<label>-quick.json with --quick), and a
-- compact table on stdout, last; progress goes to stderr.
local ffi = require "ffi"
local bit = require "bit"
local wisp = require "wisp"

local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift
local floor, exp, log, max, min = math.floor, math.exp, math.log, math.max, math.min
local fmt = string.format

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_cpu_timespec;
int bench_cpu_clock_gettime(int clk, bench_cpu_timespec *ts) __asm__("clock_gettime");
typedef struct bench_cpu_FILE bench_cpu_FILE;
bench_cpu_FILE *bench_cpu_fopen(const char *path, const char *mode) __asm__("fopen");
size_t bench_cpu_fwrite(const void *p, size_t size, size_t n, bench_cpu_FILE *f) __asm__("fwrite");
int bench_cpu_fclose(bench_cpu_FILE *f) __asm__("fclose");
long bench_cpu_readlink(const char *path, char *buf, size_t len) __asm__("readlink");
void *bench_cpu_mmap(void *addr, size_t len, int prot, int flags, int fd, long off) __asm__("mmap");
int bench_cpu_madvise(void *addr, size_t len, int advice) __asm__("madvise");
]]
local C = ffi.C

local TABLE_BITS = 26
local NFEAT = 2 ^ TABLE_BITS
local NV, NB = 13, 26          -- valued and binary features a row
local NF = NV + NB
local BIAS = -0.5
local ZIPF_S = 1.05
local MAX_WINDOWS = 4096

---------------------------------------------------------------------------
-- small helpers
---------------------------------------------------------------------------

local ts = ffi.new("bench_cpu_timespec")
local function now_ns()
    C.bench_cpu_clock_gettime(1, ts)    -- CLOCK_MONOTONIC
    return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
end


local function sh(cmd)
    local p = io.popen(cmd)
    if not p then return "" end
    local s = p:read("*a") or ""
    p:close()
    return s
end

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

local function read_file(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
end

local function shell_quote(s)
    if s:match("^[%w%./_,:=+-]+$") then return s end
    return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- The temporary directory (model file, peer data), removed on every way out.
local tmpdir
local function cleanup()
    if tmpdir then os.execute("rm -rf " .. shell_quote(tmpdir)); tmpdir = nil end
end
local cleanup_guard = newproxy(true)           -- an uncaught error: lua_close runs __gc
getmetatable(cleanup_guard).__gc = cleanup

local function die(msg)
    cleanup()
    io.stderr:write("bench_cpu: ", msg, "\n")
    os.exit(1)
end

local function median(t)
    local s = {}
    for i = 1, #t do s[i] = t[i] end
    table.sort(s)
    local n = #s
    if n % 2 == 1 then return s[(n + 1) / 2] end
    return 0.5 * (s[n / 2] + s[n / 2 + 1])
end

-- "10", "1k", "200k", "1M", "1m" -> number
local function parse_count(s)
    local n, suf = tostring(s):match("^(%d+%.?%d*)([kKmM]?)$")
    if not n then return nil end
    n = tonumber(n)
    if suf == "k" or suf == "K" then n = n * 1e3 elseif suf == "m" or suf == "M" then n = n * 1e6 end
    return floor(n)
end

local function parse_list(s, what)
    local t = {}
    for item in tostring(s):gmatch("[^,]+") do
        local n = parse_count(item)
        if not n or n < 1 then die(fmt("bad %s list item '%s'", what, item)) end
        t[#t + 1] = n
    end
    if #t == 0 then die("empty " .. what .. " list") end
    return t
end

local function human(n)
    if n >= 1e6 and n % 1e6 == 0 then return (n / 1e6) .. "M" end
    if n >= 1e3 and n % 1e3 == 0 then return (n / 1e3) .. "k" end
    return tostring(n)
end

---------------------------------------------------------------------------
-- JSON: a pretty encoder (stable key order) and a decoder (lua-cjson, else a tiny one)
---------------------------------------------------------------------------

local function json_num(v)
    if v ~= v or v == math.huge or v == -math.huge then return "null" end
    if v == floor(v) and math.abs(v) < 2 ^ 53 then return fmt("%d", v) end
    return fmt("%.6g", v)
end

local function json_str(s)
    return '"' .. s:gsub('[%c"\\]', function(c)
        local m = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\t"] = "\\t", ["\r"] = "\\r" }
        return m[c] or fmt("\\u%04x", c:byte())
    end) .. '"'
end

local function is_array(t)
    local n = 0
    for _ in pairs(t) do n = n + 1 end
    return n > 0 and n == #t          -- an empty table encodes as {}
end

local function json_encode(v, indent, inline)
    indent = indent or ""
    local t = type(v)
    if t == "nil" then return "null"
    elseif t == "boolean" then return tostring(v)
    elseif t == "number" then return json_num(v)
    elseif t == "string" then return json_str(v)
    elseif t == "table" then
        local inner = indent .. "  "
        if is_array(v) then
            if #v == 0 then return "[]" end
            local parts = {}
            -- arrays of flat objects: one object a line
            for i = 1, #v do parts[i] = json_encode(v[i], inner, type(v[i]) == "table") end
            return "[\n" .. inner .. table.concat(parts, ",\n" .. inner) .. "\n" .. indent .. "]"
        end
        local keys = {}
        for k in pairs(v) do keys[#keys + 1] = tostring(k) end
        table.sort(keys)
        if #keys == 0 then return "{}" end
        local parts = {}
        for i, k in ipairs(keys) do
            parts[i] = json_str(k) .. ": " .. json_encode(v[k], inner, inline)
        end
        if inline then return "{" .. table.concat(parts, ", ") .. "}" end
        return "{\n" .. inner .. table.concat(parts, ",\n" .. inner) .. "\n" .. indent .. "}"
    end
    return json_str(tostring(v))
end

-- A tiny JSON decoder for when lua-cjson is missing (objects, arrays, strings,
-- numbers, true/false/null; \uXXXX kept as '?' outside ASCII).
local function tiny_json_decode(s)
    local pos = 1
    local function ws() pos = s:find("[^ \t\r\n]", pos) or #s + 1 end
    local value
    local function str()
        local out = {}
        pos = pos + 1
        while true do
            local c = s:sub(pos, pos)
            if c == "" then error("unterminated string") end
            if c == '"' then pos = pos + 1; break end
            if c == "\\" then
                local e = s:sub(pos + 1, pos + 1)
                local m = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }
                if e == "u" then
                    local cp = tonumber(s:sub(pos + 2, pos + 5), 16) or 63
                    out[#out + 1] = cp < 128 and string.char(cp) or "?"
                    pos = pos + 6
                else
                    out[#out + 1] = m[e] or e
                    pos = pos + 2
                end
            else
                out[#out + 1] = c
                pos = pos + 1
            end
        end
        return table.concat(out)
    end
    function value()
        ws()
        local c = s:sub(pos, pos)
        if c == "{" then
            local t = {}
            pos = pos + 1; ws()
            if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
            while true do
                ws()
                local k = str()
                ws()
                if s:sub(pos, pos) ~= ":" then error("':' expected at " .. pos) end
                pos = pos + 1
                t[k] = value()
                ws()
                local d = s:sub(pos, pos)
                pos = pos + 1
                if d == "}" then return t end
                if d ~= "," then error("',' or '}' expected at " .. pos) end
            end
        elseif c == "[" then
            local t = {}
            pos = pos + 1; ws()
            if s:sub(pos, pos) == "]" then pos = pos + 1; return t end
            while true do
                t[#t + 1] = value()
                ws()
                local d = s:sub(pos, pos)
                pos = pos + 1
                if d == "]" then return t end
                if d ~= "," then error("',' or ']' expected at " .. pos) end
            end
        elseif c == '"' then
            return str()
        elseif s:sub(pos, pos + 3) == "true" then pos = pos + 4; return true
        elseif s:sub(pos, pos + 4) == "false" then pos = pos + 5; return false
        elseif s:sub(pos, pos + 3) == "null" then pos = pos + 4; return nil
        else
            local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
            if not num or num == "" then error("unexpected '" .. c .. "' at " .. pos) end
            pos = pos + #num
            return tonumber(num)
        end
    end
    return value()
end

local function json_decode(s)
    local ok, cjson = pcall(require, "cjson")
    if ok then
        local dok, v = pcall(cjson.decode, s)
        if dok then
            -- cjson.null -> nil, so the result reads like the tiny decoder's
            local function strip(x)
                if type(x) ~= "table" then return x end
                for k, e in pairs(x) do
                    if e == cjson.null then x[k] = nil else strip(e) end
                end
                return x
            end
            return strip(v)
        end
        return nil, v
    end
    local dok, v = pcall(tiny_json_decode, s)
    if dok then return v end
    return nil, v
end

---------------------------------------------------------------------------
-- options
---------------------------------------------------------------------------

local argv = {}
for i = 1, #arg do argv[i] = arg[i] end

-- the commit, the machine, where to write (build/results/ unless --record or WISP_RECORD=1)
local R = dofile(((arg[0] or "scripts/bench/bench_cpu.lua"):match("^(.*)/[^/]*$") or ".") .. "/../lib/record.lua")
local RECORD = R.take_record_flag(arg)
local opt = {
    quick = false, threads = nil, sizes = nil, dists = { "uniform", "zipf" },
    hugepages = "both", pool = nil, repeats = nil, min_ms = nil, peer = true,
    peer_rows = nil, label = nil, out = nil,
}
do
    local i = 1
    local function val(name)
        local v = argv[i + 1]
        if v == nil then die("option " .. name .. " needs a value") end
        i = i + 2
        return v
    end
    while i <= #argv do
        local a = argv[i]
        if a == "--quick" then opt.quick = true; i = i + 1
        elseif a == "--no-peer" then opt.peer = false; i = i + 1
        elseif a == "--threads" then opt.threads = parse_list(val(a), "threads")
        elseif a == "--sizes" then opt.sizes = parse_list(val(a), "sizes")
        elseif a == "--dists" then
            opt.dists = {}
            for d in val(a):gmatch("[^,]+") do
                if d ~= "uniform" and d ~= "zipf" then die("--dists: uniform and/or zipf, got " .. d) end
                opt.dists[#opt.dists + 1] = d
            end
        elseif a == "--hugepages" then
            opt.hugepages = val(a)
            if opt.hugepages ~= "both" and opt.hugepages ~= "on" and opt.hugepages ~= "off" then
                die("--hugepages: both, on or off")
            end
        elseif a == "--pool" then opt.pool = parse_count(val(a)) or die("--pool: a row count")
        elseif a == "--peer-rows" then opt.peer_rows = parse_count(val(a)) or die("--peer-rows: a row count")
        elseif a == "--repeats" then opt.repeats = parse_count(val(a)) or die("--repeats: a number")
        elseif a == "--min-ms" then opt.min_ms = tonumber(val(a)) or die("--min-ms: a number")
        elseif a == "--label" then opt.label = val(a)
        elseif a == "--out" then opt.out = val(a)
        elseif a == "-h" or a == "--help" then
            local f = io.open(arg[0], "r")
            if f then
                for line in f:lines() do
                    if not line:match("^%-%-") then break end
                    print((line:gsub("^%-%- ?", "")))
                end
                f:close()
            end
            os.exit(0)
        else
            die("unknown argument " .. a .. " (try --help)")
        end
    end
end

local sizes = opt.sizes or (opt.quick and { 10, 1000, 10000, 200000 }
                                      or { 10, 100, 1000, 10000, 100000, 200000, 1000000 })
table.sort(sizes)
local max_size = sizes[#sizes]
local check_rows = 4096
local pool_rows = opt.pool or (opt.quick and 400000 or 4000000)
pool_rows = max(pool_rows, max_size, check_rows)
local repeats = opt.repeats or (opt.quick and 3 or 5)
local min_ns = (opt.min_ms or (opt.quick and 10 or 40)) * 1e6
local peer_rows = min(opt.peer_rows or (opt.quick and pool_rows or 1000000), pool_rows)
local hp_modes = opt.hugepages == "both" and { false, true } or { opt.hugepages == "on" }

local script_dir = (arg[0] or "scripts/bench/bench_cpu.lua"):match("^(.*)/[^/]*$") or "."

---------------------------------------------------------------------------
-- the machine
---------------------------------------------------------------------------

local cpuinfo = read_file("/proc/cpuinfo") or ""
local cpu_model = cpuinfo:match("model name%s*:%s*([^\n]+)") or cpuinfo:match("Model%s*:%s*([^\n]+)") or "unknown"
local logical_cpus = 0
for _ in cpuinfo:gmatch("\nprocessor%s*:") do logical_cpus = logical_cpus + 1 end
if cpuinfo:match("^processor%s*:") then logical_cpus = logical_cpus + 1 end
local mem_total = (read_file("/proc/meminfo") or ""):match("MemTotal:%s*(%d+)")
local thp = trim(read_file("/sys/kernel/mm/transparent_hugepage/enabled") or "unknown")

local default_engine = assert(wisp.engine())
local engine_cores = default_engine:threads()
local devices, gpu_status = default_engine:devices()
default_engine:close()

local gpus = {}
for _, d in ipairs(devices) do
    if d.kind == "gpu" then gpus[#gpus + 1] = d.product end
end
local gpu_desc
if #gpus > 0 then
    gpu_desc = table.concat(gpus, ", ")
else
    local smi = trim(sh("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null"))
    gpu_desc = smi ~= "" and (smi:gsub("\n", ", ") .. " (not used by this build: " .. gpu_status .. ")") or "none"
end

local thread_list = opt.threads
if not thread_list then
    thread_list = {}
    local t = 1
    while t < engine_cores do thread_list[#thread_list + 1] = t; t = t * 2 end
    thread_list[#thread_list + 1] = engine_cores
end

local hostname = trim(sh("hostname 2>/dev/null"))
if hostname == "" then hostname = trim(read_file("/etc/hostname") or "host") end
local label = (opt.label or hostname):gsub("[^%w%._-]", "_")
local out_path = opt.out or R.out_path("bench_cpu_" .. label .. (opt.quick and "-quick" or "") .. ".json", RECORD)

local commit = R.commit()

local function exe_path()
    local buf = ffi.new("char[4096]")
    local n = tonumber(C.bench_cpu_readlink("/proc/self/exe", buf, 4095))
    if n <= 0 then return "wisp" end
    local p = ffi.string(buf, n)
    local cwd = trim(sh("pwd"))
    if cwd ~= "" and p:sub(1, #cwd + 1) == cwd .. "/" then p = p:sub(#cwd + 2) end
    return p
end
local command_parts = { exe_path(), "run", arg[0] or "scripts/bench/bench_cpu.lua" }
for _, a in ipairs(argv) do command_parts[#command_parts + 1] = shell_quote(a) end
local command = table.concat(command_parts, " ")

local loadavg_start = trim(read_file("/proc/loadavg") or "")
local t_start = now_ns()
local function elapsed() return (now_ns() - t_start) / 1e9 end
local function note(...) io.stderr:write(fmt("[%6.1fs] ", elapsed()), fmt(...), "\n") end

note("bench_cpu: %s, %d cores (engine), threads {%s}, sizes {%s}, pool %s rows, THP %s",
     cpu_model, engine_cores, table.concat(thread_list, ","),
     table.concat((function() local t = {} for i, s in ipairs(sizes) do t[i] = human(s) end return t end)(), ","),
     human(pool_rows), thp)

---------------------------------------------------------------------------
-- data: weights and row pools in FFI memory (deterministic)
---------------------------------------------------------------------------

-- xorshift128 (Marsaglia) on 32-bit words; draws are signed 32-bit numbers.
local function rng(seed)
    local x, y, z, w = 123456789, 362436069, 521288629, bxor(88675123, seed * 2654435761 % 4294967296)
    for _ = 1, 16 do
        local t = bxor(x, lshift(x, 11))
        x, y, z = y, z, w
        w = bxor(w, rshift(w, 19), bxor(t, rshift(t, 8)))
    end
    return function()
        local t = bxor(x, lshift(x, 11))
        x, y, z = y, z, w
        w = bxor(w, rshift(w, 19), bxor(t, rshift(t, 8)))
        return w
    end
end

-- Zipf(s) over ranks 1..n, exact: the top K = 2^16 ranks (about 73% of the draws at
-- s = 1.05, n = 2^26) by a guide table over their CDF, the tail by rejection-inversion
-- (Hörmann & Derflinger 1996, as in Apache Commons RNG's RejectionInversionZipfSampler)
-- restricted to ranks > K. The head's share is its exact sum over the tail's sum by
-- Euler-Maclaurin (relative error ~1e-15).
local function zipf_sampler(n, s)
    local oms = 1 - s
    local function H(x) return (x ^ oms - 1) / oms end             -- integral of x^-s
    local function Hinv(u)
        local b = 1 + u * oms
        if b < 0 then b = 0 end
        return b ^ (1 / oms)
    end
    local function h(x) return x ^ -s end
    local K = min(n, 65536)
    local cdf = ffi.new("double[?]", K)
    local zh = 0
    for k = 1, K do zh = zh + k ^ -s; cdf[k - 1] = zh end
    for i = 0, K - 1 do cdf[i] = cdf[i] / zh end
    cdf[K - 1] = 1
    local zt = 0
    if n > K then
        local a, b = K + 1, n
        zt = (b ^ oms - a ^ oms) / oms + (a ^ -s + b ^ -s) / 2 + s * (a ^ (-s - 1) - b ^ (-s - 1)) / 12
    end
    local ph = zh / (zh + zt)
    local G = K
    local guide = ffi.new("int32_t[?]", G)
    local k = 0
    for j = 0, G - 1 do
        while cdf[k] < j / G do k = k + 1 end
        guide[j] = k
    end
    local lo, hn = H(K + 0.5), H(n + 0.5)
    local sc = 2 - Hinv(H(2.5) - h(2))   -- squeeze: k - x <= sc accepts at once (k >= 2)
    return function(unif)   -- unif: a uniform [0, 1) draw
        local u = unif()
        if u < ph then
            local v = u / ph
            local i = guide[floor(v * G)]
            while cdf[i] < v do i = i + 1 end
            return i + 1
        end
        while true do
            local w = lo + unif() * (hn - lo)
            local x = Hinv(w)
            local r = floor(x + 0.5)
            if r <= K then r = K + 1 elseif r > n then r = n end
            if r - x <= sc or w >= H(r + 0.5) - h(r) then return r end
        end
    end
end

-- Criteo-like values of the 13 valued features: log1p(x)/4 of a heavy-tailed count x.
local vtab = ffi.new("float[4096]")
for i = 0, 4095 do
    local x = floor(exp((i + 0.5) / 4096 * 8) - 1)
    vtab[i] = log(1 + x) / 4
end

-- Large arrays in anonymous memory with transparent huge pages asked for
-- (MADV_HUGEPAGE), as numpy does for its arrays of 4 MiB and more: the batch data
-- of wisp and of the scipy peer then sit in the same kind of memory. Never freed
-- (the process ends after the run). Falls back to ffi.new.
local big_arrays = {}
local function big_array(ctype, n)
    local bytes = n * ffi.sizeof(ctype)
    local HP = 2 * 1024 * 1024
    local len = math.ceil(bytes / HP) * HP + HP
    local p = C.bench_cpu_mmap(nil, len, 3, 0x22, -1, 0)     -- PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    if p == nil or ffi.cast("intptr_t", p) == -1 then
        local a = ffi.new(ctype .. "[?]", n)
        big_arrays[#big_arrays + 1] = a
        return ffi.cast(ctype .. " *", a)
    end
    local addr = tonumber(ffi.cast("uintptr_t", p))
    local aligned = math.ceil(addr / HP) * HP
    local q = ffi.cast("char *", p) + (aligned - addr)
    C.bench_cpu_madvise(q, len - HP, 14)                        -- MADV_HUGEPAGE; failure is harmless
    return ffi.cast(ctype .. " *", q)
end

local function make_weights()
    local w = big_array("float", NFEAT)
    local r = rng(3)
    for i = 0, NFEAT - 1 do
        w[i] = (r() % 4294967296) * (0.6 / 4294967296) - 0.3     -- uniform(-0.3, 0.3)
    end
    return w
end

-- A pool of `rows` rows: ids[rows*39] (13 valued ids then 26 binary), vals[rows*13].
local function make_pool(dist, rows)
    local ids = big_array("uint32_t", rows * NF)
    local vals = big_array("float", rows * NV)
    local r = rng(dist == "zipf" and 2 or 1)
    local mask = NFEAT - 1
    if dist == "uniform" then
        for i = 0, rows * NF - 1 do ids[i] = band(r(), mask) end
    else
        local function unif() return (r() % 4294967296) * (1 / 4294967296) end
        local zs = zipf_sampler(NFEAT, ZIPF_S)
        local mult = 2 * floor(NFEAT * 0.3819660113) + 1          -- odd: a bijection mod 2^26
        for i = 0, rows * NF - 1 do
            ids[i] = ((zs(unif) - 1) * mult) % NFEAT               -- < 2^52: exact in doubles
        end
    end
    for i = 0, rows * NV - 1 do vals[i] = vtab[band(r(), 4095)] end
    return { dist = dist, rows = rows, ids = ids, vals = vals }
end

-- Shared offsets: indptr[r] = 39 r, val_ptr[r] = 13 r, for every window (the timed
-- sizes, the correctness samples, the rows the peer's cross-check compares).
local peer_check_rows = min(peer_rows, 200000)
local max_window = max(max_size, check_rows, peer_check_rows)
local indptr = big_array("uint32_t", max_window + 1)
local val_ptr = big_array("uint32_t", max_window + 1)
for r = 0, max_window do indptr[r] = r * NF; val_ptr[r] = r * NV end

local t0 = now_ns()
local weights = make_weights()
note("weights: 2^%d fp32 in %.2f s", TABLE_BITS, (now_ns() - t0) / 1e9)

local pools = {}
for _, d in ipairs(opt.dists) do
    t0 = now_ns()
    pools[d] = make_pool(d, pool_rows)
    note("pool %s: %s rows x %d features in %.2f s", d, human(pool_rows), NF, (now_ns() - t0) / 1e9)
end

-- Distinct ids touched by a pool (a fact worth recording for the Zipf case).
local function distinct_ids(pool, nrows)
    local seen = ffi.new("uint8_t[?]", NFEAT / 8)
    local n, ids = 0, pool.ids
    for i = 0, nrows * NF - 1 do
        local id = ids[i]
        local byte, b = rshift(id, 3), lshift(1, band(id, 7))
        if band(seen[byte], b) == 0 then seen[byte] = bit.bor(seen[byte], b); n = n + 1 end
    end
    return n
end

---------------------------------------------------------------------------
-- temp dir, model file
---------------------------------------------------------------------------

do
    local d = trim(sh("mktemp -d /dev/shm/wisp-bench-cpu.XXXXXX 2>/dev/null"))
    if d == "" then d = trim(sh("mktemp -d 2>/dev/null")) end
    if d == "" then die("cannot create a temporary directory") end
    tmpdir = d
end
local workdir = tmpdir

local model_path = workdir .. "/model.wisp"
t0 = now_ns()
do
    local ok, err = wisp.write_model(model_path, weights, NFEAT, { bias = BIAS, meta = { source = "bench_cpu.lua" } })
    if not ok then die(err) end
end
note("model: %s written in %.2f s", model_path, (now_ns() - t0) / 1e9)

local function write_raw(path, ptr, bytes)
    local f = C.bench_cpu_fopen(path, "wb")
    if f == nil then return nil, "cannot open " .. path end
    local n = C.bench_cpu_fwrite(ptr, 1, bytes, f)
    C.bench_cpu_fclose(f)
    if tonumber(n) ~= bytes then return nil, "short write to " .. path end
    return true
end

---------------------------------------------------------------------------
-- correctness: a float64 reference on sample rows
---------------------------------------------------------------------------

local function reference(pool, first, n, out)   -- out: double[n]
    local ids, vals = pool.ids, pool.vals
    for r = 0, n - 1 do
        local row = first + r
        local z = BIAS
        local base, vbase = row * NF, row * NV
        for j = 0, NV - 1 do z = z + weights[ids[base + j]] * vals[vbase + j] end
        for j = NV, NF - 1 do z = z + weights[ids[base + j]] end
        out[r] = 1 / (1 + exp(-z))
    end
end

local check_firsts = { 0, max(0, pool_rows - check_rows) }
local refs = {}
for _, d in ipairs(opt.dists) do
    refs[d] = {}
    for i, first in ipairs(check_firsts) do
        local n = min(check_rows, pool_rows - first)
        local buf = ffi.new("double[?]", n)
        reference(pools[d], first, n, buf)
        refs[d][i] = { first = first, n = n, p = buf }
    end
end

local function window(eng, pool, first, rows)
    local b, err = wisp.batch_from_ffi(rows, indptr, pool.ids + first * NF, val_ptr, pool.vals + first * NV, eng)
    if not b then die("batch_from_ffi: " .. tostring(err)) end
    return b
end

local out_buf = ffi.new("float[?]", max_window)
local out_ptr = ffi.cast("float *", out_buf)

local function check(eng, sess, d)
    local worst = 0
    for _, ref in ipairs(refs[d]) do
        local b = window(eng, pools[d], ref.first, ref.n)
        local ok, err = sess:score(b, out_ptr)
        b:close()
        if not ok then die("score: " .. tostring(err)) end
        for r = 0, ref.n - 1 do
            local diff = math.abs(out_buf[r] - ref.p[r])
            if not (diff <= worst) then worst = diff end
        end
    end
    if not (worst <= 1e-5) then
        die(fmt("correctness: %s ids, max |wisp - float64 reference| = %g > 1e-5", d, worst))
    end
    return worst
end

---------------------------------------------------------------------------
-- timing
---------------------------------------------------------------------------

local function anon_huge_mb()
    local s = read_file("/proc/self/smaps_rollup") or ""
    local kb = s:match("AnonHugePages:%s*(%d+)")
    return kb and tonumber(kb) / 1024 or nil
end

-- Median per-batch time (ns) over `repeats` passes of >= min_ns, after a warm-up pass.
local function time_batches(sess, batches)
    local nb = #batches
    local k = 1
    local per, calls_total = {}, 0
    local score = sess.score
    for rep = 0, repeats do
        local calls = 0
        local t = 0
        local s0 = now_ns()
        repeat
            local ok, err = score(sess, batches[k], out_ptr)
            if not ok then die("score: " .. tostring(err)) end
            k = k + 1
            if k > nb then k = 1 end
            calls = calls + 1
            t = now_ns() - s0
        until t >= min_ns
        if rep > 0 then
            per[#per + 1] = t / calls
            calls_total = calls_total + calls
        end
    end
    local lo, hi = math.huge, 0
    for _, v in ipairs(per) do lo = min(lo, v); hi = max(hi, v) end
    return median(per), lo, hi, calls_total
end

local function nwindows(rows, pool) return max(1, min(floor(pool / rows), MAX_WINDOWS)) end

local results, checks = {}, {}
local huge_mb
for _, hp in ipairs(hp_modes) do
    for _, threads in ipairs(thread_list) do
        local eng, err = wisp.engine { threads = threads }
        if not eng then die("engine: " .. tostring(err)) end
        local huge_before = anon_huge_mb()
        local model
        model, err = eng:load(model_path, { hugepages = hp })
        if not model then die("load: " .. tostring(err)) end
        if hp and huge_mb == nil and huge_before then huge_mb = (anon_huge_mb() or 0) - huge_before end
        local sess
        sess, err = model:session("cpu")
        if not sess then die("session: " .. tostring(err)) end
        for _, d in ipairs(opt.dists) do
            local worst = check(eng, sess, d)
            checks[#checks + 1] = { dist = d, hugepages = hp, threads = threads,
                                    rows = check_rows * #check_firsts, max_abs_diff = worst }
            for _, rows in ipairs(sizes) do
                local nw = nwindows(rows, pool_rows)
                local batches = {}
                for k = 1, nw do batches[k] = window(eng, pools[d], (k - 1) * rows, rows) end
                sess:reset_stats()
                local med, lo, hi, calls = time_batches(sess, batches)
                local st = sess:stats()
                for k = 1, nw do batches[k]:close() end
                batches = nil
                local r = {
                    dist = d, hugepages = hp, threads = threads, rows = rows, windows = nw,
                    calls = calls, ms = med / 1e6, ms_min = lo / 1e6, ms_max = hi / 1e6,
                    rows_per_s = rows / (med / 1e9), ns_per_feature = med / (rows * NF),
                    kernel_ms = st.batches > 0 and st.ns_kernel / st.batches / 1e6 or nil,
                }
                results[#results + 1] = r
                note("%-7s hp=%-3s t=%-2d %7s rows: %9.4f ms  %8.3f Mrows/s  %6.2f ns/feature (%d windows)",
                     d, hp and "on" or "off", threads, human(rows), r.ms, r.rows_per_s / 1e6, r.ns_per_feature, nw)
            end
        end
        sess:close(); model:close(); eng:close()
        collectgarbage()
    end
end

---------------------------------------------------------------------------
-- the scipy peer
---------------------------------------------------------------------------

-- nil when python3 with numpy and scipy is there, else why not.
local function peer_missing()
    if trim(sh("command -v python3 2>/dev/null")) == "" then return "python3 not found" end
    local o = sh("OMP_NUM_THREADS=1 python3 -c 'import numpy, scipy.sparse' 2>&1; echo \"rc=$?\"")
    if o:match("rc=0%s*$") then return nil end
    local last
    for line in o:gmatch("[^\n]+") do if not line:match("^rc=") then last = line end end
    return "python3 cannot import numpy/scipy: " .. (last or "unknown error")
end

local peer = { available = false, reason = "disabled (--no-peer)" }
local why_no_peer = opt.peer and peer_missing()
if why_no_peer then peer.reason = why_no_peer end
if opt.peer and not why_no_peer then
    t0 = now_ns()
    local ok, err = write_raw(workdir .. "/weights.f32", weights, NFEAT * 4)
    if not ok then die(err) end
    -- wisp's probabilities for the first rows, 1 thread, for the peer's cross-check
    local ncheck = peer_check_rows
    local eng = assert(wisp.engine { threads = 1 })
    local model = assert(eng:load(model_path))
    local sess = assert(model:session("cpu"))
    local chunk = 65536
    local rp = ffi.new("int32_t[?]", peer_rows + 1)
    for r = 0, peer_rows do rp[r] = r * NF end
    local dbuf = ffi.new("float[?]", chunk * NF)
    for _, d in ipairs(opt.dists) do
        local pool = pools[d]
        local b = window(eng, pool, 0, ncheck)
        assert(sess:score(b, out_ptr))
        b:close()
        ok, err = write_raw(workdir .. "/" .. d .. ".wisp.f32", out_buf, ncheck * 4)
        if ok then ok, err = write_raw(workdir .. "/" .. d .. ".indptr.i32", rp, (peer_rows + 1) * 4) end
        if ok then ok, err = write_raw(workdir .. "/" .. d .. ".indices.i32", pool.ids, peer_rows * NF * 4) end
        if not ok then die(err) end
        local f = C.bench_cpu_fopen(workdir .. "/" .. d .. ".data.f32", "wb")
        if f == nil then die("cannot write the peer's data") end
        for first = 0, peer_rows - 1, chunk do
            local n = min(chunk, peer_rows - first)
            for r = 0, n - 1 do
                local o, vo = r * NF, (first + r) * NV
                for j = 0, NV - 1 do dbuf[o + j] = pool.vals[vo + j] end
                for j = NV, NF - 1 do dbuf[o + j] = 1 end
            end
            C.bench_cpu_fwrite(dbuf, 4, n * NF, f)
        end
        C.bench_cpu_fclose(f)
    end
    sess:close(); model:close(); eng:close()
    note("peer data: %s rows a distribution written in %.2f s", human(peer_rows), (now_ns() - t0) / 1e9)

    local peer_sizes = {}
    for _, s in ipairs(sizes) do if s <= peer_rows then peer_sizes[#peer_sizes + 1] = s end end
    local peer_script = script_dir .. "/bench_scipy_peer.py"
    local cmd = fmt("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 "
                    .. "python3 %s %s --sizes %s --dists %s --repeats %d --min-ms %g "
                    .. "--max-windows %d --check-rows %d --bias %.17g 2>%s",
                    shell_quote(peer_script), shell_quote(workdir), table.concat(peer_sizes, ","),
                    table.concat(opt.dists, ","), repeats, min_ns / 1e6, MAX_WINDOWS, ncheck, BIAS,
                    shell_quote(workdir .. "/peer.err"))
    note("peer: %s", cmd)
    t0 = now_ns()
    local outp = sh(cmd)
    local decoded, derr
    if trim(outp) ~= "" then decoded, derr = json_decode(outp) end
    if type(decoded) == "table" then
        peer = decoded
        if peer.available then
            -- the same windows as wisp's only when the peer's rows cover them
            peer.note = fmt("the first %s rows of each pool; windows [k*B, (k+1)*B), k < min(%s/B, %d)",
                            human(peer_rows), human(peer_rows), MAX_WINDOWS)
        end
    else
        local errtxt = trim(read_file(workdir .. "/peer.err") or "")
        if #errtxt > 400 then errtxt = "..." .. errtxt:sub(-400) end
        local have_py = trim(sh("command -v python3 2>/dev/null"))
        peer = { available = false,
                 reason = have_py == "" and "python3 not found"
                          or ("peer failed: " .. (derr and ("bad JSON: " .. tostring(derr) .. "; ") or "")
                              .. (errtxt ~= "" and errtxt or "no output")) }
    end
    peer.command = cmd:gsub(" 2>.*$", "")
    note("peer: done in %.2f s (%s)", (now_ns() - t0) / 1e9, peer.available and "available" or tostring(peer.reason))
end

---------------------------------------------------------------------------
-- ratios, JSON, table
---------------------------------------------------------------------------

local function find(dist, hp, threads, rows)
    for _, r in ipairs(results) do
        if r.dist == dist and r.hugepages == hp and r.threads == threads and r.rows == rows then return r end
    end
end
local function find_peer(dist, rows)
    if not peer.available or type(peer.results) ~= "table" then return nil end
    for _, r in ipairs(peer.results) do
        if r.dist == dist and r.rows == rows then return r end
    end
end

local TARGET_ROWS = 200000
local ratios = {}
for _, d in ipairs(opt.dists) do
    for _, hp in ipairs(hp_modes) do
        local w1, p = find(d, hp, 1, TARGET_ROWS), find_peer(d, TARGET_ROWS)
        if w1 and p then
            ratios[#ratios + 1] = {
                dist = d, hugepages = hp, rows = TARGET_ROWS,
                wisp_ms = w1.ms, scipy_ms = p.total_ms, scipy_matvec_ms = p.matvec_ms,
                ratio = p.total_ms / w1.ms, ratio_vs_matvec_only = p.matvec_ms / w1.ms,
            }
        end
    end
end

local distinct = {}
for _, d in ipairs(opt.dists) do
    local n = min(pool_rows, 1000000)
    distinct[d] = { rows = n, distinct_ids = distinct_ids(pools[d], n) }
end

local total_s = elapsed()
local doc = {
    benchmark = "bench_cpu",
    description = "in-process CPU scoring (session:score) of prebuilt zero-copy batches; "
        .. "39 features a row (13 valued + 26 binary, mixed value mode), 2^26 random fp32 weights, "
        .. "uniform and Zipf(1.05) ids over the whole table; median of repeats, rotating through "
        .. "distinct windows of a large row pool",
    machine = { cpu = cpu_model, logical_cpus = logical_cpus, engine_cores = engine_cores,
                mem_total_gb = mem_total and tonumber(mem_total) / 1048576 or nil,
                transparent_hugepages = thp, hostname = hostname,
                kernel = trim(sh("uname -r 2>/dev/null")),
                loadavg_start = loadavg_start, loadavg_end = trim(read_file("/proc/loadavg") or "") },
    gpu = gpu_desc,
    commit = commit,
    wisp_version = wisp.version(),
    date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
    command = command,
    label = label,
    mode = opt.quick and "quick" or "full",
    seconds = total_s,
    setup = {
        num_features = NFEAT, dtype = "f32", bias = BIAS, features_per_row = NF,
        valued_per_row = NV, binary_per_row = NB, zipf_s = ZIPF_S,
        pool_rows = pool_rows, peer_rows = peer_rows, max_windows = MAX_WINDOWS, repeats = repeats, min_ms = min_ns / 1e6,
        threads = thread_list, sizes = sizes, hugepages = hp_modes,
        weights_huge_pages_mb = huge_mb,   -- AnonHugePages gained by the first hugepages load
        distinct_ids_in_first_rows = distinct,
    },
    correctness = checks,
    results = results,
    peer = peer,
    ratio_at_200k_1thread = ratios,
    target = "wisp on 1 thread >= 3x scipy CSR mat-vec at 200k rows",
}

local dir = out_path:match("^(.*)/[^/]*$")
if dir then os.execute("mkdir -p " .. shell_quote(dir)) end
local f = io.open(out_path, "w")
if not f then die("cannot write " .. out_path) end
f:write(json_encode(R.envelope(doc)), "\n")
f:close()
cleanup()

-- compact table: Mrows/s per size, one line per (ids, huge pages, threads)
local lines = {}
local function add(s) lines[#lines + 1] = s end
add(fmt("bench_cpu on %s (%d cores), commit %s, %.0f s; M rows/s (ns/feature at the largest size)",
        cpu_model, engine_cores, commit, total_s))
local head = fmt("%-8s %-4s %3s", "ids", "hp", "thr")
for _, s in ipairs(sizes) do head = head .. fmt(" %8s", human(s)) end
add(head .. "   ns/feat")
for _, d in ipairs(opt.dists) do
    for _, hp in ipairs(hp_modes) do
        for _, t in ipairs(thread_list) do
            local line = fmt("%-8s %-4s %3d", d, hp and "on" or "off", t)
            local last
            for _, s in ipairs(sizes) do
                local r = find(d, hp, t, s)
                line = line .. (r and fmt(" %8.3f", r.rows_per_s / 1e6) or fmt(" %8s", "-"))
                last = r or last
            end
            add(line .. (last and fmt("   %6.2f", last.ns_per_feature) or ""))
        end
    end
    if peer.available then
        local line = fmt("%-8s %-8s", d, "scipy:1")
        for _, s in ipairs(sizes) do
            local p = find_peer(d, s)
            line = line .. (p and fmt(" %8.3f", p.rows_per_s / 1e6) or fmt(" %8s", "-"))
        end
        add(line)
    end
end
if peer.available then
    for d, c in pairs(peer.check or {}) do
        add(fmt("scipy vs wisp, %s ids: max |p diff| = %.3g over %d rows", d, c.max_abs_diff, c.rows))
    end
    for _, r in ipairs(ratios) do
        add(fmt("200k rows, 1 thread, %s ids, hugepages %s: wisp %.2f ms, scipy %.2f ms (mat-vec alone %.2f ms): %.2fx (target >= 3x)",
                r.dist, r.hugepages and "on" or "off", r.wisp_ms, r.scipy_ms, r.scipy_matvec_ms, r.ratio))
    end
else
    add("scipy peer: unavailable (" .. tostring(peer.reason) .. ")")
end
add("written: " .. out_path)
print(table.concat(lines, "\n"))
