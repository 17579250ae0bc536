-- nginx.lua — wisp inside OpenResty/nginx: per-worker models with hot reload, request parsing (JSON rows, JSON lines, libsvm), batching, metrics.
--
-- Use (examples/openresty/nginx.conf is a complete configuration, a template filled by serve.sh):
--
--   lua_shared_dict wisp 4m;                                   -- metrics and reload generations, all workers
--   thread_pool wisp threads=2;          -- for mode = "thread" or "auto" (the default on a GPU)
--   init_by_lua_block { require("wisp.nginx").configure { models = "ctr=/srv/ctr.wisp", device = "auto" } }
--   init_worker_by_lua_block { require("wisp.nginx").init_worker() }
--   location / { content_by_lua_block { require("wisp.nginx").handle() } }
--
-- configure{} only records options: it loads no library, creates no engine, no thread and
-- touches no GPU, because nginx forks its workers after init_by_lua and neither CUDA
-- contexts nor thread pools survive fork(). Each worker loads the model files in
-- init_worker (wisp.load: a private copy of the bytes it verified, engine/model.c: a
-- file changed under it cannot change or crash what it serves), makes its engine (its own CPU threads) and sessions; the CUDA backend is discovered
-- there, on the first session that asks for a GPU. spec/nginx/run.sh checks that the
-- master process holds one thread and has not mapped libwisp at all.
--
-- Requests (the contract; README "The nginx service" has the same text):
--   POST /v1/models/NAME:predict
--     Content-Type: application/json   {"instances": [row, ...]}
--        a model with feature columns: row = {"input": value, ...} (raw features; a list for
--        a sparse input; null or absent = missing), transformed exactly as wisp.columns does;
--        a model without columns: row = {"ids": [0-based ids], "vals": [values]} (vals
--        optional: then every feature is binary; when present, one value per id).
--        For a model with columns every body goes to the C JSON-lines parser (the commas
--        between the instances become newlines in a per-worker buffer): one decode path,
--        so a row scores bit for bit as `wisp score --format jsonl` scores it whatever its
--        neighbours and the body's other keys ("signature_name" and any other key is
--        skipped); numbers are read from their text (a decimal rounded straight to float32,
--        an int64 exact beyond 2^53). cjson only checks that a body with other keys or a
--        bad row is JSON at all (400 "bad JSON" if not); an instance that is not an object
--        is a bad row ("an object of input values expected, got a number").
--        For a model without columns (cjson): an id is a JSON number with an integer value,
--        0 <= id < 2^64, ids at or beyond the model's features ignored when scored (as
--        libsvm's; a double holds every id below 2^53 exactly and any id above is out of
--        every model's range, so no score depends on its rounding); a value is a number
--        that rounds to a finite float32 (1e39 does not). Anything else (an object or a
--        string for "ids", "1", 1.5, null) makes the row bad with a message naming what was
--        sent ('got the string "1"'). One limit of lua-cjson 2.1: {} and [] decode alike,
--        so "ids": {} is read as an empty list.
--     Content-Type: application/x-ndjson or application/jsonl   (a model with feature
--        columns only; 415 otherwise) JSON lines: one object of raw inputs a line, as a
--        row above ({"age": 37, "city": "Paris", "tags": ["a", "b"]}; null = missing),
--        handed straight to wisp_raw_parse_jsonl (the entry's reused raw batch) and scored
--        by wisp_session_score_raw (fused transform + score on a GPU); the same rows as
--        `wisp score --format jsonl`. Blank lines make no row. A bad line (invalid JSON or
--        UTF-8, an unknown input, a value of the wrong type) is a row with prediction null
--        and {"index", "error", "line": 1-based line of the body} in "errors".
--     Content-Type: text/plain or text/x-libsvm   libsvm lines "[label] id:value id ...",
--        one row a line (the label is ignored; blank and '#' lines make no row), ids 0-based.
--     200 {"model":, "version":, "device":, "predictions": [p, ...]}; a row that cannot be
--        scored (bad value, unknown input, malformed line) has prediction null and an entry
--        {"index": i (0-based row), "error": "..."[, "line": n]} in "errors"; the other rows
--        are scored. When no row can be scored: 400 with the same body plus "error".
--     400 bad JSON / no "instances" list / empty request (also a body of blank lines);
--     404 unknown model; 405 wrong method (Allow header); 413 body over
--     client_max_body_size or more rows than max_rows_per_request (any format); 415 other
--     content types, JSON lines for a model without columns, or a Content-Encoding other
--     than identity (gzip bodies are not decoded); 503 model not loaded (yet).
--     Every error is JSON: {"error": "...", ...}, also those nginx answers itself before
--     Lua runs (400 bad request line, 400 header too large, 408, 411, 414, 405 for TRACE,
--     413, 500-504): examples/openresty/errors.conf, included by every server.
--   Every prediction that is null has its "errors" entry (spec/nginx/run.sh checks it
--   over every answer it gets).
--   GET /v1/models, GET /v1/models/NAME   metadata (version = mtime, size, inode and the
--        file's header checksum; features, dtype, columns, device, reload state)
--   POST /v1/models/NAME:reload           reload now in every worker (the answering worker
--        reports its result; the others follow within reload_check_s). Debounced: a file
--        whose stat identity (inode, size, mtime) and header checksum are the serving
--        version's is not read again: 200 {"reloaded": false, "unchanged": true}. A failed
--        or refused reload: 500 with the reason, the loaded version keeps serving.
--   Admin endpoints (:reload, /metrics): configure{admin = "open"} (the default) serves them
--        on every listener; admin = "separate" answers them 403 except in a server whose
--        handler is handle(true) (serve.sh --admin-port N renders that second listener).
--   GET /healthz (200 while the worker runs), /readyz (200 only when every model is loaded
--        and has scored a warm-up row on its device), /metrics (Prometheus text, summed
--        over the workers through the shared dict). GET endpoints answer HEAD too.
--
-- Hot reload: every reload_check_s (default 1 s) a timer in each worker stats each model
-- file (inode, size, mtime); a change, or a new generation posted by :reload, loads the
-- file into a new entry (engine shared, new model + sessions + batcher) and swaps it in.
-- A request takes the entry serving when its body has arrived (reading it yields, and a
-- reload may swap the entry meanwhile), holds it (inflight) through parse, score, any
-- wait (batcher, async, the thread pool) and the answer, in every mode; an old entry is
-- closed when its last in-flight request ends. A file that fails to load (truncated, bad
-- checksum) leaves the old entry serving; the failure goes to the error log,
-- /v1/models/NAME ("reload.error", "file") and wisp_model_reloads_total{result="failed"};
-- that same file is not tried again until it changes.
-- The operator contract: replace a served model by rename in the same directory (write
-- the new file next to it, then mv; wisp_model_write and `wisp convert` do so). What
-- happens otherwise: a file changed in place (cp over it, truncate, bytes rewritten, even
-- a touch: the serving version's inode with another size, mtime or header checksum) is
-- refused without being read (it may be half-written; the worker's private copy keeps
-- serving the verified bytes, so nothing crashes and no answer mixes versions), logged
-- once per state of the file, counted as wisp_model_reloads_total{result="refused"} and
-- reported: /v1/models/NAME "file": {"state": "changed in place, refused: <why>",
-- "serving": <version>}, and /readyz models.NAME.warning. /readyz stays 200 then: the
-- worker still serves a verified version, and every replica of a fleet gets the same cp,
-- so answering 503 would turn one operator mistake into an outage of every replica; the
-- warning says what to fix. Until a file is renamed in, the refusal stands (a file
-- removed is "missing": the loaded version keeps serving too).
--
-- Blocking work and the event loop (mode = "inline" | "thread" | "async" | "auto"), measured
-- by scripts/bench/bench_nginx.sh (scripts/results/bench_nginx-dev-2core.json): the 2-core
-- development machine, CPU device, 2 workers, wrk on the same two cores, the demo model
-- (6.8M fp32 weights, 39 features a row), 3 interleaved rounds; the machine was shared
-- with other engineers' builds, so throughput swings 2x between rounds; the CPU time the
-- workers spent per request (/proc utime+stime over the run) is the steadier figure:
--   (medians of 3 rounds)  100-row libsvm request               1-row request
--   inline   worker CPU 160 µs/request, 755k rows/s       16 µs, 50k req/s    <- the default on a CPU
--   async    208 µs, 470k rows/s                          27 µs, 30k req/s
--   thread   206 µs, 488k rows/s                          46 µs, 22k req/s
--   auto     185 µs, 556k rows/s (thread: body >= 16 KB)
--   in-process peer: parse + score of the same body, 83 µs of CPU (1.20M rows/CPU-s),
--   1.19M rows/s wall (one process): inline is 0.44-0.89 of it round by round.
-- Since then the inline path was cut (scripts/results/bench_nginx-dev-2core-inline-before*.json
-- and -after*.json: 9f2383a's nginx.lua and this one, one after the other, --modes inline,
-- 2 + 1 rounds each): 100-row requests 120-149 -> 77-88 µs of worker CPU, 6.8-7.9k ->
-- 11.1-12.5k req/s, 0.41-0.52 -> 0.60-0.73 of the peer's rows per CPU-second (the peer
-- spends 52-74 µs a body); 1-row 17.4 -> 11.5 µs; 100 JSON rows 0.89-1.25 -> 0.79-0.85 ms.
-- On a quieter machine (-after3.json) 17.5k req/s = 1.75M rows/s, 0.93-0.99 of one peer
-- process's rows/s (two workers). worker_cpu_affinity auto (serve.sh --cpu-affinity auto,
-- -affinity.json) made no clear difference: off by default. Where a 100-row
-- request's time went (perf and LuaJIT's jit.p in a worker): the libsvm parser ~30%,
-- scoring ~10%, kernel TCP and context switches ~25%, and Lua ~21%, mostly in the
-- interpreter: the answer's 100 string.format("%.9g") + table.concat (~20 µs), the
-- argument checks of batch:parse_libsvm / session:score and an options table, a table of
-- device stages, 8 histogram observations each with a bucket search that LuaJIT leaves
-- to its interpreter, and a string.format for the requests_total label. Now: the answer
-- is written into one FFI buffer (put_num: 9 significant digits without loops; checked
-- against %.9g by spec/nginx/format_check.lua), the C parser and scorer are called
-- straight, observations are recorded as (series, value) pairs and bucketed at each
-- flush, labels are memoised; and the example config reads a request of up to
-- client_header_buffer_size (64k) in one recv() with its body in one buffer
-- (get_body_data copies it once): 10-15 µs of the gain. Left: parse + score ~60%
-- (the same work as the peer), kernel ~25%, Lua ~10%.
-- Then (scripts/results/bench_nginx-dev-2core-cpu6*.json): libsvm and JSON-lines bodies
-- reach the C parsers straight from nginx's buffer (body_ptr: $request_body through
-- resty.core's FFI; get_body_data made a 39 KB Lua string a request: interned, so with
-- wrk's identical bodies a 39 KB memcmp, with real ones an allocation, a copy and
-- garbage), put_num splits digits without divisions (100 values 2.8 -> 1.5 µs; all
-- 112M float32 in [1e-4, 1) print as %.9g does), answers carry Content-Length (no
-- chunked encoding: an answer over postpone_output leaves in one writev, not two), the
-- route is memoised. Paired A/B on the 2-core machine (both servers up, 2 s wrk runs
-- alternating): 2-7 µs less worker CPU a 100-row request (median of pairs; the box's
-- noise is larger), perf: Lua + LuaJIT + libc 15 -> 10 of ~150 sampled units. What is
-- left there is not Lua: wrk on the same 2 cores preempts a worker ~0.8 times a request
-- (/proc nonvoluntary_ctxt_switches) at ~8 µs each; bench_nginx.sh --wrk-batch
-- (SCHED_BATCH wrk) or --pin (wrk on other cores) takes that out of the measurement.
-- Pinned (one worker on CPU 0, wrk on CPU 1; perf): libwisp 53%, kernel 31%, of which 18%
-- of all samples are the worker's writev running wrk's side of loopback TCP and waking
-- wrk on the other core (sock_def_readable: a cross-CPU wakeup, costly in this VM); a
-- client on another machine would not cost the server that. Lua + nginx + libc ~15%.
-- Raw-feature rows (scripts/results/bench_nginx-dev-2core-ndjson.json, bench_nginx.sh
-- --raw-bodies: a columns model of 13 numeric + 26 hash buckets of 2^18, the same 100 rows
-- sent 4 ways, inline, 3 interleaved rounds, noisy shared machine), worker CPU per request,
-- median (range): JSON lines 267 µs (236-318); {"instances"} through the C parser 404 µs
-- (361-425); the same body through cjson + per-row adds (the path before; no body of a
-- model with columns takes it now, other keys and bad rows included) 754 µs (725-773); libsvm of the transformed rows 109 µs
-- (88-112). JSON lines cost what wisp_raw_parse_jsonl + the transform cost (string hashing:
-- ~2.5x libsvm); {"instances"} adds the byte scan that makes them lines (~120 µs for 55 KB).
--   inline  parse + score in the worker's event loop. Cheapest per request, nothing copied,
--           and short enough (a 100-row request ~0.14 ms of CPU) not to stall other
--           connections; the HTTP floor (an empty Lua handler reading the 30 KB body) is
--           ~20 µs, the answer's JSON ~16 µs.
--   thread  ngx.run_worker_thread(pool, "wisp.nginx", "thread_predict", ...): the body is
--           copied into a pool thread's own Lua VM, which loads the model itself (one load
--           per VM; lua-nginx-module makes a VM per queued call, so calls are bounded by
--           thread_slots per worker) and returns the encoded answer. The VM scores only
--           with the exact version the request holds (file stamp and header checksum); when
--           the file at the path is another one by then (renamed over, broken), the worker
--           scores the request inline with its entry (wisp_errors_total{kind="thread_stale"}). +29% CPU per 100-row
--           request, 2.8x for 1 row. Its throughput can look higher on a busy machine (more
--           runnable threads get more of the CPU), and it frees the event loop on a
--           machine with idle cores; not the default.
--   async   session:submit, ngx.sleep(0) (other requests run), then session:wait, with a
--           FIFO so a light thread waits only for its own batch. On a CPU session submit
--           scores before it returns, so this is inline plus a yield; it is meant for
--           GPUs (the loop runs while the batch crosses PCIe). Debian's nginx lacks
--           OpenResty's "delayed events" patch: every ngx.sleep(0) logs a warning there.
-- On the H200 machine (16 cores, GPU device, scripts/results/bench_nginx-h200-gpu-quick*.json,
-- short single-round runs): one worker, mode thread or auto, scores 100-row requests at
-- 1.37M rows/s, 1.05x the in-process peer (1.31M), with p99 1.5 ms: there the pool threads
-- use idle cores and keep the GPU round trips off the event loop; inline reaches 0.65M.
-- Two workers on one GPU are two CUDA contexts that the GPU time-slices: two peer
-- processes together score 0.72M rows/s where one scores 1.31M, and 1-row requests fall
-- from 42.8k/s (1 worker, p99 0.5 ms) to 7.2k/s. So on a GPU: worker_processes 1 per GPU
-- (or CUDA MPS) and mode = "auto".
-- Single-row requests can be coalesced per worker by wisp.batcher (batching = true). It
-- loses everywhere we measured: ngx timers count milliseconds, so a batch waits at least
-- 1 ms, while one row scores in microseconds (CPU: 9.4k req/s batched vs 50k unbatched;
-- GPU, 1 worker: 10.0k vs 42.8k). Default: off; "auto" batches on a GPU only.

local ffi = require "ffi"

local type, tostring, tonumber, pairs, ipairs, pcall, error = type, tostring, tonumber, pairs, ipairs, pcall, error
local fmt, concat, floor, huge = string.format, table.concat, math.floor, math.huge

local M = { _VERSION = "0.1" }

local cfg = nil            -- options from configure()
local models = {}          -- name -> slot {name, path, device, cur = entry, ...}
local model_names = {}     -- sorted names
local engine = nil         -- this worker's engine (one per worker or thread VM)
local wisp, C              -- loaded in init_worker (or in a worker thread's VM)
local cjson                -- a private cjson instance (its settings are ours)
local thread_sema          -- bounds this worker's calls into the thread pool (mode thread/auto)

local DEFAULTS = {
    models = nil, device = "auto", mode = "device", thread_pool = "wisp",
    batching = false, batch_max_rows = 64, batch_max_delay_us = 500, batch_queue = 4096,
    max_rows_per_request = 10000, reload_check_s = 1, shm = "wisp", engine_threads = 1,
    flush_s = 0.2, lag_check_s = 0.01, thread_min_bytes = 16384, thread_slots = 2,
    cpu_mode = "inline", gpu_mode = "auto",     -- what mode = "device" (the default) picks
    admin = "open",          -- "open": :reload and /metrics on every listener; "separate": only
                             -- where nginx.conf calls handle(true) (serve.sh --admin-port)
}
local MODES = { inline = true, thread = true, async = true, auto = true }

---------------------------------------------------------------------------
-- small helpers (no ngx here: the worker-thread VM shares them)
---------------------------------------------------------------------------

local clock                 -- seconds, from wisp_clock_ns (ngx.now() is the cached millisecond time)

local function load_libs()
    if wisp then return end
    wisp = require "wisp"
    C = require "wisp.cdef"
    clock = function() return tonumber(C.wisp_clock_ns()) * 1e-9 end
    cjson = require("cjson.safe").new()
    cjson.encode_number_precision(9)          -- float32 round-trips in 9 digits
    cjson.encode_sparse_array(true)
    cjson.decode_max_depth(32)
end

-- body_ptr() -> pointer, length of the request body in nginx's memory, or nil (no body, or
-- it is in a temporary file): the $request_body variable read through lua-resty-core's FFI
-- call (ngx.var would make it a Lua string). For one body buffer nginx hands out that
-- buffer itself, which lives until the request ends. Set in init_worker; nil without
-- resty.core (then the body is read with ngx.req.get_body_data).
local body_ptr = nil
local function init_body_ptr()
    local ok, base = pcall(require, "resty.core.base")
    if not ok or type(base) ~= "table" or not base.get_request then return end
    local fn
    ok = pcall(function() require "resty.core.var"; fn = ffi.C.ngx_http_lua_ffi_var_get end)
    if not ok or not fn then return end
    local get_request = base.get_request
    local vp, lp, ep = ffi.new("unsigned char *[1]"), ffi.new("size_t[1]"), ffi.new("char *[1]")
    local lower = ffi.new("char[16]")
    body_ptr = function()
        local r = get_request()
        if r == nil then return nil end
        if fn(r, "request_body", 12, lower, 0, vp, lp, ep) ~= 0 then return nil end
        local n = tonumber(lp[0])
        if n == 0 then return nil end
        return vp[0], n
    end
end

-- file identity: inode, size, mtime (ns), from stat(2) (the x86_64 Linux struct layout;
-- elsewhere the file's header checksum, read each check, is the identity)
local stat_ok = ffi.arch == "x64" and ffi.os == "Linux" and pcall(ffi.cdef, [[
struct wisp_ngx_stat { uint64_t dev, ino, nlink; uint32_t mode, uid, gid, pad0; uint64_t rdev;
                       int64_t size, blksize, blocks; int64_t atime, atime_ns, mtime, mtime_ns,
                       ctime, ctime_ns; int64_t reserved[3]; };
int wisp_ngx_stat_fn(const char *path, struct wisp_ngx_stat *st) __asm__("stat");
int wisp_ngx_fstat_fn(int fd, struct wisp_ngx_stat *st) __asm__("fstat");
int wisp_ngx_open_fn(const char *path, int flags) __asm__("open");
int wisp_ngx_close_fn(int fd) __asm__("close");
]])
local stbuf = stat_ok and ffi.new("struct wisp_ngx_stat") or nil
if stat_ok and not pcall(function() return ffi.C.wisp_ngx_stat_fn end) then stat_ok = false end
local pin_ok = stat_ok and pcall(function() return ffi.C.wisp_ngx_fstat_fn, ffi.C.wisp_ngx_open_fn, ffi.C.wisp_ngx_close_fn end)

-- An entry holds its file open (O_RDONLY; nothing is mapped, so it cannot SIGBUS): while the
-- inode is held the file system cannot give its number to a new file, so "the serving
-- version's inode" always means the very file that was loaded. Without the pin, a file
-- renamed in later could get the freed inode number of the serving one and be taken for an
-- in-place change of it (found by spec/nginx/soak.sh: v1 renamed back was refused for good).
local function pin_file(path, ino)
    if not pin_ok then return nil end
    local fd = ffi.C.wisp_ngx_open_fn(path, 0x80000)          -- O_RDONLY | O_CLOEXEC
    if fd < 0 then return nil end
    if ffi.C.wisp_ngx_fstat_fn(fd, stbuf) ~= 0 or tonumber(stbuf.ino) ~= ino then
        ffi.C.wisp_ngx_close_fn(fd)                            -- another file by now: no pin
        return nil
    end
    return fd
end

-- the file's header checksum (bytes 48..55 of a .wisp file) as 16 hex digits, or nil
local function header_checksum(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local h = f:read(64)
    f:close()
    if not h or #h < 56 then return nil end
    local hex = {}
    for i = 56, 49, -1 do hex[#hex + 1] = fmt("%02x", h:byte(i)) end
    return concat(hex)
end

-- A cheap identity of the file now: "ino:size:mtime_ns" (or the header checksum
-- when stat is not usable); nil when the file is missing.
local function file_stamp(path)
    if stat_ok then
        if ffi.C.wisp_ngx_stat_fn(path, stbuf) ~= 0 then return nil end
        return fmt("%d:%d:%d.%09d", tonumber(stbuf.ino), tonumber(stbuf.size), tonumber(stbuf.mtime),
                   tonumber(stbuf.mtime_ns)), {
            inode = tonumber(stbuf.ino), dev = tonumber(stbuf.dev), size = tonumber(stbuf.size),
            mtime = tonumber(stbuf.mtime) + tonumber(stbuf.mtime_ns) / 1e9 }
    end
    local c = header_checksum(path)
    return c, c and {} or nil
end
M.file_stamp = file_stamp

local function parse_models(spec)
    local list = {}
    if type(spec) == "string" then
        for item in spec:gmatch("[^,%s]+") do
            local name, path = item:match("^([%w_.%-]+)=(.+)$")
            if not name then error("wisp.nginx: models: 'name=path' expected, got '" .. item .. "'", 3) end
            list[#list + 1] = { name = name, path = path }
        end
    elseif type(spec) == "table" then
        for k, v in pairs(spec) do
            if type(k) == "string" and type(v) == "string" then list[#list + 1] = { name = k, path = v }
            elseif type(v) == "table" then list[#list + 1] = { name = v.name or k, path = v.path, device = v.device } end
        end
    end
    if #list == 0 then error("wisp.nginx: configure{models = 'name=path,...'} expected", 3) end
    table.sort(list, function(a, b) return a.name < b.name end)
    return list
end

local function new_engine(threads)
    local e, err = wisp.engine { threads = threads }
    if not e then return nil, err end
    return e
end

---------------------------------------------------------------------------
-- entries: one loaded version of one model file
---------------------------------------------------------------------------

local Entry = {}; Entry.__index = Entry

local function float_buf(n) return ffi.new("float[?]", n) end

-- Load path into a new entry: model, columns transformer (when the model has
-- columns), a session on `device`, a warm-up score. Returns entry or nil, err.
local function open_entry(name, path, device, opts)
    local stamp, fileinfo = file_stamp(path)
    if not stamp then return nil, path .. ": cannot stat (missing file?)" end
    local checksum = header_checksum(path)
    local model, err = wisp.load(path, { engine = engine })
    if not model then return nil, err end
    -- the identity recorded is the one of the bytes loaded: the same before and after
    -- the load, or the load is refused (a file written while it was read)
    if file_stamp(path) ~= stamp or header_checksum(path) ~= checksum then
        model:close()
        return nil, path .. ": the file changed while it was being loaded (replace a model by rename)"
    end
    local e = setmetatable({ name = name, path = path, device_asked = device, model = model, stamp = stamp,
                             file = fileinfo, checksum = checksum, inflight = 0,
                             retired = false, pending = nil }, Entry)
    e.pin = fileinfo.inode and pin_file(path, fileinfo.inode) or nil
    e.info = model:info()
    e.version = e.checksum and e.checksum:sub(1, 12) or stamp
    local ok, cerr = pcall(function()
        if e.info.columns then
            local fc = require "wisp.columns"
            local spec, serr = fc.from_model(model)
            if not spec then error(serr, 0) end
            e.spec = spec
            e.inputs = spec:input_list()
            e.slices = spec:slices()
            e.tr = assert(spec:transformer(engine))
        end
        e.session = assert(model:session(device))
        C.wisp_session_set_profiling(e.session._h, 1)
        e.batch = assert(engine:batch())
        e.outcap = 1024
        e.out = float_buf(e.outcap)
        -- warm-up: one empty row scored on the device proves the device usable
        assert(e.batch:add({}))
        local out = assert(e.session:score(e.batch, e.out))
        if out[0] ~= out[0] then error("warm-up row scored NaN", 0) end
        e.batch:clear()
        e.device = e.session:last_device()
    end)
    if not ok then
        e:close()
        return nil, fmt("%s: %s", path, tostring(cerr))
    end
    return e
end

function Entry:close()
    for _, k in ipairs { "batcher", "bsession", "session", "tr", "batch", "model" } do
        local o = self[k]
        if o and o.close then pcall(o.close, o) end
        self[k] = nil
    end
    if self.pool then for _, b in ipairs(self.pool) do pcall(b.close, b) end; self.pool = nil end
    if self.pin then ffi.C.wisp_ngx_close_fn(self.pin); self.pin = nil end
    self.closed = true
end

function Entry:release()
    self.inflight = self.inflight - 1
    if self.retired and self.inflight <= 0 and not self.closed then self:close() end
end

local line_box, used_box                    -- out-arguments of wisp_batch_parse_libsvm / wisp_raw_parse_jsonl
local bad_row_box, bad_line_box, bad_msg_box -- out-arguments of wisp_raw_bad_row

local function c_error(rc)
    local msg = ffi.string(C.wisp_errmsg())
    if msg == "" then msg = ffi.string(C.wisp_strerror(rc)) end
    return msg
end

-- the bad rows of a raw batch h -> errs (list of {index, error, line}), bad (set), or nil
-- when there is none
local function raw_bad_rows(h)
    local nb = tonumber(C.wisp_raw_bad_count(h))
    if nb == 0 then return nil, nil end
    if not bad_row_box then
        bad_row_box, bad_line_box, bad_msg_box = ffi.new("size_t[1]"), ffi.new("uint64_t[1]"), ffi.new("const char *[1]")
    end
    local errs, bad = {}, {}
    for i = 0, nb - 1 do
        if C.wisp_raw_bad_row(h, i, bad_row_box, bad_line_box, bad_msg_box) == 0 then
            local r = tonumber(bad_row_box[0])
            errs[#errs + 1] = { index = r, line = tonumber(bad_line_box[0]), error = ffi.string(bad_msg_box[0]) }
            bad[r] = true
        end
    end
    return errs, bad
end

-- the bad rows of a batch b (after the transform: the raw rows' and the transform's own)
local function batch_bad_rows(b, with_line)
    if tonumber(C.wisp_batch_bad_count(b._h)) == 0 then return nil, nil end
    local errs, bad = {}, {}
    for _, r in ipairs(b:bad_rows()) do
        errs[#errs + 1] = { index = r.row, line = with_line and r.line or nil, error = r.msg }
        bad[r.row] = true
    end
    return errs, bad
end

-- {"instances": [...]} for a model with columns, without cjson's numbers: the body is
-- copied into a reused buffer where the commas between the instances become newlines and
-- the newlines inside them spaces (JSON strings hold no raw newline), so that the span
-- between [ and ] is JSON lines for wisp_raw_parse_jsonl, which reads every number from
-- its text (an int64 input above 2^53 stays exact; cjson would round it through a double).
-- Every body for a model with columns takes this one path: other top-level keys
-- ("signature_name", ...) are skipped, an instance that is not an object becomes a line
-- the C parser refuses (a bad row, named below), and a body with such keys or a bad row is
-- also decoded by cjson only to check that it is valid JSON (else 400, as before).
-- -> pointer, length, instances, extra (a key other than "instances" was seen), the
-- elements' first bytes (uint8 array) and the body offsets of their lines (uint32 array); or nil
-- when the body is not an object with one "instances" list (the caller asks cjson why).
local lines_buf, lines_cap = nil, 0
local lines_arr = ffi.typeof("uint8_t[?]")
local starts_buf, starts_cap, firsts_buf = nil, 0, nil
local function is_ws(c) return c == 32 or c == 9 or c == 10 or c == 13 end

-- the index after the JSON string that starts at p[i] == '"' (nil when it does not end),
-- and whether it holds an escape
local function skip_string(p, i, len)
    local has_esc = false
    i = i + 1
    while i < len do
        local c = p[i]
        if c == 92 then has_esc = true; i = i + 2
        elseif c == 34 then return i + 1, has_esc
        elseif c < 32 then return nil
        else i = i + 1 end
    end
    return nil
end

-- the index after the JSON value at p[i] (structure only: cjson checks the rest), or nil
local function skip_value(p, i, len)
    local c = p[i]
    if c == 34 then return (skip_string(p, i, len)) end
    if c == 123 or c == 91 then
        local depth = 0
        while i < len do
            c = p[i]
            if c == 34 then
                i = skip_string(p, i, len)
                if not i then return nil end
            else
                if c == 123 or c == 91 then depth = depth + 1
                elseif c == 125 or c == 93 then
                    depth = depth - 1
                    if depth == 0 then return i + 1 end
                end
                i = i + 1
            end
        end
        return nil
    end
    while i < len do                                  -- a number or a literal
        c = p[i]
        if c == 44 or c == 125 or c == 93 or is_ws(c) then break end
        i = i + 1
    end
    return i
end

-- record element nobj + 1 (0-based nobj): its line's start and first byte -> nobj + 1
local function note_element(nobj, ls, c)
    if nobj >= starts_cap then
        starts_cap = nobj * 2 > 64 and nobj * 2 or 64
        local ns, nf = ffi.new("uint32_t[?]", starts_cap), ffi.new("uint8_t[?]", starts_cap)
        if starts_buf then ffi.copy(ns, starts_buf, nobj * 4); ffi.copy(nf, firsts_buf, nobj) end
        starts_buf, firsts_buf = ns, nf
    end
    starts_buf[nobj] = ls; firsts_buf[nobj] = c
    return nobj + 1
end

local function instances_as_lines(body, blen)
    local len = blen or #body
    if len > lines_cap then
        lines_cap = len > 2 * lines_cap and len or 2 * lines_cap
        lines_buf = lines_arr(lines_cap)
    end
    local p = lines_buf
    ffi.copy(p, body, len)
    local i = 0
    while i < len and is_ws(p[i]) do i = i + 1 end
    if i >= len or p[i] ~= 123 then return nil end
    i = i + 1
    local first, extra, span, spanlen, nobj = true, false, nil, 0, 0
    while true do
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if first and p[i] == 125 then break end       -- {}
        first = false
        if p[i] ~= 34 then return nil end
        local ke, has_esc = skip_string(p, i, len)
        if not ke then return nil end
        local key = ffi.string(p + i + 1, ke - i - 2)
        if has_esc then key = cjson.decode('"' .. key .. '"') end
        i = ke
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len or p[i] ~= 58 then return nil end   -- ':'
        i = i + 1
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if key == "instances" then
            if span or p[i] ~= 91 then return nil end   -- a second "instances", or not a list
            -- the elements: at depth 0, ',' -> '\n' and each element's start recorded; one
            -- loop with the string state inline (a loop per string, as skip_string, made a
            -- trace exit a string: 1.8x the time)
            local s = i + 1
            local depth, want, close, ls = 0, true, nil, s
            local instr, esc = false, false
            local j = s
            while j < len do
                local c = p[j]
                if instr then
                    if esc then esc = false
                    elseif c == 92 then esc = true
                    elseif c == 34 then instr = false
                    elseif c < 32 then return nil end            -- a raw control character
                elseif c == 34 then
                    instr = true
                    if depth == 0 then
                        if not want then return nil end
                        want = false; nobj = note_element(nobj, ls, c)
                    end
                elseif c == 123 or c == 91 then                  -- { [
                    if depth == 0 then
                        if not want then return nil end
                        want = false; nobj = note_element(nobj, ls, c)
                    end
                    depth = depth + 1
                elseif c == 125 or c == 93 then                  -- } ]
                    if depth == 0 then
                        if c ~= 93 or (want and nobj > 0) then return nil end   -- '}' or a trailing ','
                        close = j; break
                    end
                    depth = depth - 1
                elseif c == 10 or c == 13 then p[j] = 32
                elseif depth == 0 then
                    if c == 44 then                              -- ,
                        if want then return nil end              -- an empty element
                        p[j] = 10; want = true; ls = j + 1
                    elseif c ~= 32 and c ~= 9 then               -- a number's or a literal's byte
                        if want then want = false; nobj = note_element(nobj, ls, c)
                        elseif p[j - 1] == 32 or p[j - 1] == 9 then return nil end   -- a second value
                    end
                end
                j = j + 1
            end
            if not close then return nil end
            span, spanlen = s, close - s
            i = close + 1
        else
            extra = true
            i = skip_value(p, i, len)
            if not i then return nil end
        end
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if p[i] == 125 then break end
        if p[i] ~= 44 then return nil end
        i = i + 1
    end
    i = i + 1
    while i < len and is_ws(p[i]) do i = i + 1 end
    if i < len or not span then return nil end
    return p + span, spanlen, nobj, extra, firsts_buf, starts_buf
end
-- the runs of number characters ([0-9.eE+-]) over 511 bytes in body: a list of {start
-- (1-based), length}, or nil. A byte loop the JIT compiles (~1 ns a byte; a Lua pattern of
-- 512 classes cost ~45 ns a byte)
local NUMCH = ffi.new("uint8_t[256]")
for ch in ("0123456789.eE+-"):gmatch(".") do NUMCH[ch:byte()] = 1 end
local u8ptr = ffi.typeof("const uint8_t *")
local function long_number_runs(body)
    local p = ffi.cast(u8ptr, body)
    local list, run = nil, 0
    local n = #body
    for i = 0, n do
        if i < n and NUMCH[p[i]] == 1 then run = run + 1
        else
            if run > 511 then list = list or {}; list[#list + 1] = { i - run + 1, run } end
            run = 0
        end
    end
    return list
end
local function inst_firsts() return firsts_buf end
local function inst_starts() return starts_buf end
M._instances_as_lines = function(body)   -- for tests: the lines, the element count, extra keys
    load_libs()
    local ptr, n, nobj, extra = instances_as_lines(body)
    if not ptr then return nil end
    return ffi.string(ptr, n), nobj, extra
end

-- JSON values as cjson decodes them (lua-cjson 2.1 marks no arrays): a list is a table
-- whose keys are exactly 1..#t (an empty table counts as a list: {} and [] decode alike);
-- an object any other table (an empty one too)
local function json_is_list(t)
    local n = #t
    if n == 0 then return next(t) == nil end
    local k = 0
    for _ in pairs(t) do k = k + 1 end
    return k == n
end
local function json_is_object(t) return next(t) == nil or not json_is_list(t) end

-- what a JSON value is, for messages: the string "1", a list, an object, null, true, 1.5
local function json_what(v)
    local t = type(v)
    if v == nil then return "nothing (the key is missing)" end
    if t == "string" then
        local s = cjson.encode(#v > 40 and v:sub(1, 40) .. "..." or v)
        return "the string " .. s
    end
    if t == "table" then
        if next(v) == nil then return "an empty list or object" end
        return json_is_list(v) and "a list" or "an object"
    end
    if t == "number" then
        if v ~= v then return "NaN" elseif v == huge then return "a number beyond the range of a double (read as +inf)"
        elseif v == -huge then return "a number beyond the range of a double (read as -inf)" end
        return fmt("%.17g", v)
    end
    if t == "boolean" then return tostring(v) end
    if cjson and v == cjson.null then return "null" end
    return t
end
local f32_box = ffi.new("float[1]")

-- the bad rows of an {"instances"} body as the C parser gave them, said in the body's
-- terms: an instance that is not an object is named for what it is, a column of its
-- line becomes a byte of the body; no line numbers (the instances are not lines)
local FIRST_KIND = { [34] = "a string", [91] = "a list", [110] = "null", [116] = "true", [102] = "false" }
local function instance_errors(errs, firsts, starts)
    if not errs then return nil end
    for _, er in ipairs(errs) do
        local r = er.index
        local c = firsts[r]
        if c ~= 123 then
            er.error = "an object of input values expected, got " .. (FIRST_KIND[c] or "a number")
        else
            local ls = starts[r]
            er.error = er.error:gsub("^line %d+: ", ""):gsub("at column (%d+)", function(col)
                return "at byte " .. (ls + tonumber(col)) .. " of the body" end)
        end
        er.line = nil
    end
    return errs
end

-- parse a request body into a batch (rows appended to b, an empty batch; the transformer
-- is used for JSON rows of a model with columns). Returns rows, errs (list of {index,
-- error[, line]}), bad (set: 0-based index -> true), both nil when every row parsed; or
-- nil, status, message, extra. raw_ok (JSON lines only): leave the rows in the entry's
-- transformer (e.tr) for wisp_session_score_raw, untransformed; the 4th result is then true.
-- body: a Lua string, or (kind libsvm or jsonl only) a pointer to blen bytes.
local function parse_into(e, b, kind, body, max_rows, raw_ok, blen)
    blen = blen or #body
    if kind == "jsonl" then
        -- JSON lines of raw inputs: the C parser straight into the entry's reused raw batch
        local tr = e.tr
        if not tr then
            return nil, 415, "application/x-ndjson (JSON lines of raw inputs) needs a model with feature columns;"
                .. " use application/json {\"instances\": [{\"ids\": [...], \"vals\": [...]}]} or text/x-libsvm"
        end
        if not line_box then line_box, used_box = ffi.new("uint64_t[1]"), ffi.new("size_t[1]") end
        local h = tr._h
        C.wisp_raw_clear(h)
        line_box[0] = 0
        local rc = C.wisp_raw_parse_jsonl(h, body, blen, 1, max_rows + 1, line_box, used_box)
        if rc ~= 0 then return nil, 400, "cannot parse the JSON lines body: parse_jsonl: " .. c_error(rc) end
        local n = tonumber(C.wisp_raw_rows(h))
        if n > max_rows then
            return nil, 413, fmt("too many rows: more than %d in one request", max_rows), { limit_rows = max_rows }
        end
        if n == 0 then return nil, 400, "empty request: no rows in the JSON lines body" end
        if raw_ok then
            local errs, bad = raw_bad_rows(h)
            return n, errs, bad, true
        end
        rc = C.wisp_transform(h, b._h)
        if rc ~= 0 then return nil, 500, "transform: " .. c_error(rc) end
        local errs, bad = batch_bad_rows(b, true)
        return n, errs, bad
    end
    if kind == "libsvm" then
        -- the C parser straight (batch:parse_libsvm checks its arguments and makes an
        -- options table: a few µs a request in nginx's mostly interpreted handler)
        if not line_box then line_box, used_box = ffi.new("uint64_t[1]"), ffi.new("size_t[1]") end
        local h = b._h
        line_box[0] = 0
        local rc = C.wisp_batch_parse_libsvm(h, body, blen, 1, max_rows + 1, line_box, used_box)
        if rc ~= 0 then
            local msg = ffi.string(C.wisp_errmsg())
            if msg == "" then msg = ffi.string(C.wisp_strerror(rc)) end
            return nil, 400, "cannot parse the libsvm body: parse_libsvm: " .. msg
        end
        local n = tonumber(C.wisp_batch_rows(h))
        if n > max_rows then
            return nil, 413, fmt("too many rows: more than %d in one request", max_rows), { limit_rows = max_rows }
        end
        if n == 0 then return nil, 400, "empty request: no rows in the libsvm body" end
        if tonumber(C.wisp_batch_bad_count(h)) == 0 then return n end
        local errs, bad = {}, {}
        for _, r in ipairs(b:bad_rows()) do
            errs[#errs + 1] = { index = r.row, line = r.line, error = r.msg }
            bad[r.row] = true
        end
        return n, errs, bad
    end
    local tr = e.tr
    if tr then
        -- raw rows: the C JSON-lines parser over the instances, whatever the body holds (one
        -- decode path, so a row scores the same whatever its neighbours or the other keys)
        local ptr, len, nobj, extra, firsts, starts = instances_as_lines(body, blen)
        if not ptr then
            local doc, jerr = cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
            if type(doc) ~= "table" or type(doc.instances) ~= "table" or not json_is_list(doc.instances) then
                return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
            end
            return nil, 400, 'bad request: the key "instances" appears more than once'
        end
        if nobj == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
        if nobj > max_rows then
            return nil, 413, fmt("too many rows: %d in one request (limit %d)", nobj, max_rows), { limit_rows = max_rows }
        end
        if not line_box then line_box, used_box = ffi.new("uint64_t[1]"), ffi.new("size_t[1]") end
        local h = tr._h
        C.wisp_raw_clear(h)
        line_box[0] = 0
        local rc = C.wisp_raw_parse_jsonl(h, ptr, len, 1, max_rows + 1, line_box, used_box)
        if rc ~= 0 then return nil, 500, "cannot parse the instances: parse_jsonl: " .. c_error(rc) end
        local n = tonumber(C.wisp_raw_rows(h))
        if n ~= nobj then return nil, 500, fmt("instances: %d elements read as %d rows", nobj, n) end
        local nbad = tonumber(C.wisp_raw_bad_count(h))
        if extra or nbad > 0 then
            -- the C parser read each instance; cjson only says whether the whole body is JSON
            local doc, jerr = cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
        end
        if raw_ok then
            local errs, bad = raw_bad_rows(h)
            return n, instance_errors(errs, firsts, starts), bad, true
        end
        rc = C.wisp_transform(h, b._h)
        if rc ~= 0 then return nil, 500, "transform: " .. c_error(rc) end
        local errs, bad = batch_bad_rows(b, true)
        return n, instance_errors(errs, firsts, starts), bad
    end
    local errs, bad = {}, {}
    -- JSON
    local doc, jerr = cjson.decode(body)
    if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
    if type(doc) ~= "table" or type(doc.instances) ~= "table" or not json_is_list(doc.instances) then
        return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
    end
    local inst = doc.instances
    local n = #inst
    if n == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
    if n > max_rows then
        return nil, 413, fmt("too many rows: %d in one request (limit %d)", n, max_rows), { limit_rows = max_rows }
    end
    -- numbers longer than the C readers take (511 bytes: libsvm refuses them, naming them):
    -- cjson would read them; the rows that hold one are refused the same way
    local long_rows
    local runs = long_number_runs(body)
    if runs then
        long_rows = {}
        local ptr, spanlen, nobj, _, _, starts = instances_as_lines(body)
        local sp = ptr and tonumber(ptr - lines_buf) or 0
        for _, r in ipairs(runs) do
            local off = r[1] - 1
            if ptr and nobj > 0 and off >= sp and off < sp + spanlen then
                local k = nobj - 1
                while k > 0 and starts[k] > off do k = k - 1 end
                long_rows[k] = fmt("a number of %d characters ('%s...'), longer than the 511 bytes the readers take",
                                   r[2], body:sub(r[1], r[1] + 23))
            end
        end
    end
    -- a model without columns: {"ids": [...], "vals": [...]}. The rules (the C readers' for
    -- libsvm): an id is a JSON number with an integer value, 0 <= id < 2^64; ids >= the
    -- model's features are ignored when scored (as libsvm's, as LIBLINEAR does; a double
    -- holds every id below 2^53 exactly, and any id at or above 2^53 is out of every
    -- model's range, so the rounding cannot change a score); a value is a JSON number
    -- that is a finite float32 (|v| below 3.4028235e38 once rounded). Anything else makes
    -- the row bad, with a message naming what was sent.
    for i = 1, n do
        local row = inst[i]
        local msg
        local ids, vals
        if long_rows and long_rows[i - 1] then
            msg = long_rows[i - 1]
        elseif type(row) ~= "table" or not json_is_object(row) then
            msg = "an object {\"ids\": [...], \"vals\": [...]} expected, got " .. json_what(row)
        else
            ids, vals = row.ids, row.vals
            if vals == cjson.null then vals = nil end
            if type(ids) ~= "table" or not json_is_list(ids) then
                msg = "\"ids\": a list of feature ids expected, got " .. json_what(ids)
            end
        end
        if not msg then
            local nid = #ids
            for k = 1, nid do
                local v = ids[k]
                if type(v) ~= "number" or v < 0 or v ~= floor(v) then
                    msg = fmt("\"ids\"[%d]: a non-negative integer expected, got %s", k - 1, json_what(v)); break
                elseif v >= 18446744073709551616 then
                    msg = fmt("\"ids\"[%d]: %s overflows 64 bits", k - 1, json_what(v)); break
                end
            end
            if not msg and vals ~= nil then
                if type(vals) ~= "table" or not json_is_list(vals) then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %s", nid, json_what(vals))
                elseif #vals ~= nid then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %d", nid, #vals)
                else
                    for k = 1, nid do
                        local v = vals[k]
                        if type(v) ~= "number" then
                            msg = fmt("\"vals\"[%d]: a number expected, got %s", k - 1, json_what(v)); break
                        end
                        f32_box[0] = v
                        local f = f32_box[0]
                        if f ~= f or f == huge or f == -huge then
                            msg = fmt("\"vals\"[%d]: %s is not a finite float32", k - 1, json_what(v)); break
                        end
                    end
                end
            end
        end
        local ok, err
        if not msg then
            ok, err = b:add(ids, vals)
            if not ok then msg = tostring(err) end
        end
        if msg then
            b:add({})
            errs[#errs + 1] = { index = i - 1, error = msg }
            bad[i - 1] = true
        end
    end
    return n, errs, bad
end

-- the device stages of the session's last call (profiling is on): ns
local STAGES = { "ns_h2d", "ns_kernel", "ns_d2h", "ns_sync", "ns_total" }
local stage_idx = {}

local function stage_index(name)
    if not next(stage_idx) then
        for i, nm in pairs(wisp.stat_names) do stage_idx[nm] = i end
    end
    return stage_idx[name]
end

local function last_stages(s)
    local h = s._h
    local t = {}
    for _, name in ipairs(STAGES) do t[name] = tonumber(C.wisp_session_last_stat(h, stage_index(name))) end
    return t
end

-- The answer's JSON, written into one FFI byte buffer and made a Lua string once: the
-- head ('{"model":..,"version":..,"device":..,"predictions":[') is cached per entry and
-- device, and each probability is formatted by put_num below (string.format("%.9g") and
-- a table.concat of 100 strings cost ~20 µs a 100-row answer; this costs ~2 µs).
local u8arr = ffi.typeof("uint8_t[?]")
local obuf, obuf_cap = nil, 0
local DIG2 = ffi.new("uint8_t[200]")       -- "00".."99"
for i = 0, 99 do DIG2[2 * i] = 48 + floor(i / 10); DIG2[2 * i + 1] = 48 + i % 10 end

-- Write x at buf[pos] as %.9g would for 1e-4 <= x < 1 (what a probability nearly always
-- is): "0.", the leading zeros, then 9 significant digits, correctly rounded but for
-- ties within one part in 2^53 (a float32 round-trips through 9 digits), trailing zeros
-- dropped. 0 and 1 print as "0" and "1"; NaN and infinities as null; anything else
-- goes through string.format("%.9g"). No loops (each would be a trace of its own):
-- returns the position after the text.
local function put_num(buf, pos, x)
    if x >= 1e-4 and x < 1 then
        local z, m
        -- z zeros after "0."; m: 9 significant digits (the decade bounds are doubles
        -- next to 10^-k: a rounded-up m of 10^9 or a low one under 10^8 moves z)
        if x >= 0.1 then z = 0; m = floor(x * 1e9 + 0.5)
        elseif x >= 0.01 then z = 1; m = floor(x * 1e10 + 0.5)
        elseif x >= 0.001 then z = 2; m = floor(x * 1e11 + 0.5)
        else z = 3; m = floor(x * 1e12 + 0.5) end
        if m < 1e8 then z = z + 1; m = floor(x * 10 ^ (9 + z) + 0.5) end
        if m >= 1e9 then
            m = 1e8; z = z - 1
            if z < 0 then buf[pos] = 49; return pos + 1 end      -- "1"
        end
        buf[pos] = 48; buf[pos + 1] = 46; buf[pos + 2] = 48; buf[pos + 3] = 48; buf[pos + 4] = 48
        buf[pos + 5] = 48                     -- "0.0000", of which z zeros stay
        pos = pos + 2 + z
        -- 9 digits: 1 + 4 pairs, split as 5 + 4 digits and then in pairs, without a
        -- division: floor((k + 0.5) * 10^-j) is floor(k / 10^j) for integers k < 2^30
        -- (the error of the product is far below the 0.5 * 10^-j margin); the splits
        -- of the two halves are independent (a shorter dependency chain than 4 divides)
        local hi = floor((m + 0.5) * 1e-4)
        local lo = m - hi * 1e4
        local d = floor((hi + 0.5) * 1e-4)
        local r = hi - d * 1e4
        local p1 = floor((r + 0.5) * 1e-2)
        local p2 = r - p1 * 100
        local p3 = floor((lo + 0.5) * 1e-2)
        local p4 = lo - p3 * 100
        buf[pos] = 48 + d
        buf[pos + 1] = DIG2[2 * p1]; buf[pos + 2] = DIG2[2 * p1 + 1]
        buf[pos + 3] = DIG2[2 * p2]; buf[pos + 4] = DIG2[2 * p2 + 1]
        buf[pos + 5] = DIG2[2 * p3]; buf[pos + 6] = DIG2[2 * p3 + 1]
        buf[pos + 7] = DIG2[2 * p4]; buf[pos + 8] = DIG2[2 * p4 + 1]
        pos = pos + 9
        if p4 == 0 then                       -- trailing zeros (the first digit is not 0)
            pos = pos - 2
            if p3 == 0 then
                pos = pos - 2
                if p2 == 0 then pos = pos - 2; if p1 == 0 then pos = pos - 2 end end
            end
        end
        if buf[pos - 1] == 48 then pos = pos - 1 end
        return pos
    elseif x == 0 then
        buf[pos] = 48; return pos + 1
    elseif x == 1 then
        buf[pos] = 49; return pos + 1
    elseif x ~= x or x == huge or x == -huge then
        ffi.copy(buf + pos, "null", 4); return pos + 4
    end
    local t = fmt("%.9g", x)
    ffi.copy(buf + pos, t, #t)
    return pos + #t
end

-- n values of out (an FFI float array) as a JSON list's items "p,p,...", nil for the rows
-- in bad (0-based set, or nil): for tests of put_num against string.format
function M._format_values(out, n, bad)
    local cap = n * 24 + 16
    local buf = u8arr(cap)
    local pos = 0
    for i = 0, n - 1 do
        if i > 0 then buf[pos] = 44; pos = pos + 1 end
        if bad and bad[i] then ffi.copy(buf + pos, "null", 4); pos = pos + 4
        else pos = put_num(buf, pos, out[i]) end
    end
    return ffi.string(buf, pos)
end

-- s as valid UTF-8: each byte that starts no valid sequence becomes U+FFFD. Messages
-- quote what clients sent (a URI, a model name, a body's bytes); cjson copies string bytes
-- as they are, and an answer with invalid UTF-8 is not JSON (found by spec/nginx/svcfuzz.sh)
local byte = string.byte
local function utf8_clean(s)
    if not s:find("[\128-\255]") then return s end
    local out, i, n = {}, 1, #s
    while i <= n do
        local c = byte(s, i)
        local len = c < 0x80 and 1 or (c >= 0xC2 and c <= 0xDF) and 2 or (c >= 0xE0 and c <= 0xEF) and 3
            or (c >= 0xF0 and c <= 0xF4) and 4 or 0
        local good = len > 0 and i + len - 1 <= n
        if good and len > 1 then
            for k = 1, len - 1 do
                local cc = byte(s, i + k)
                if cc < 0x80 or cc > 0xBF then good = false; break end
            end
            local c2 = byte(s, i + 1)
            if good and ((c == 0xE0 and c2 < 0xA0) or (c == 0xED and c2 > 0x9F) or (c == 0xF0 and c2 < 0x90)
                         or (c == 0xF4 and c2 > 0x8F)) then good = false end
        end
        if good then out[#out + 1] = s:sub(i, i + len - 1); i = i + len
        else out[#out + 1] = "\239\191\189"; i = i + 1 end
    end
    return concat(out)
end
M._utf8_clean = utf8_clean

-- every string in t (tables to a few levels) as valid UTF-8, in place
local function clean_strings(t, depth)
    for k, v in pairs(t) do
        if type(v) == "string" then t[k] = utf8_clean(v)
        elseif type(v) == "table" and depth < 6 then clean_strings(v, depth + 1) end
    end
    return t
end

local function sort_by_index(a, b) return a.index < b.index end

-- -> status, JSON text of the answer ending in "\n". bad: 0-based set of unscored rows
-- (or nil); errs: list of {index, error[, line]} (or nil).
local function encode_answer(e, n, out, bad, errs, device)
    -- the invariant of every answer: a null has its errors entry. A row scored NaN (or
    -- anything but a probability) that no parser or transform marked bad gets one here,
    -- whatever the path (inline, async, the batcher, a thread)
    for i = 0, n - 1 do
        local p = out[i]
        if not (p >= 0 and p <= 1) and not (bad and bad[i]) then
            errs, bad = errs or {}, bad or {}
            errs[#errs + 1] = { index = i, error = "the row scored " .. tostring(p) .. ", not a probability" }
            bad[i] = true
        end
    end
    local heads = e.heads
    if not heads then heads = {}; e.heads = heads end
    local head = heads[device]
    if not head then
        head = '{"model":' .. cjson.encode(e.name) .. ',"version":' .. cjson.encode(e.version) .. ',"device":'
            .. cjson.encode(device) .. ',"predictions":['
        heads[device] = head
    end
    local status = 200
    local tail = "]}\n"
    if errs and #errs > 0 then
        table.sort(errs, sort_by_index)
        for _, er in ipairs(errs) do er.error = utf8_clean(er.error) end
        tail = '],"errors":' .. cjson.encode(errs)
        if #errs >= n then
            status = 400
            tail = tail .. ',"error":"no row could be scored (see errors)"'
        end
        tail = tail .. "}\n"
    end
    local need = #head + n * 24 + #tail
    if need > obuf_cap then
        obuf_cap = need > 2 * obuf_cap and need or 2 * obuf_cap
        obuf = u8arr(obuf_cap)
    end
    local buf = obuf
    ffi.copy(buf, head, #head)
    local pos = #head
    if bad then
        for i = 0, n - 1 do
            if i > 0 then buf[pos] = 44; pos = pos + 1 end
            if bad[i] then ffi.copy(buf + pos, "null", 4); pos = pos + 4
            else pos = put_num(buf, pos, out[i]) end
        end
    else
        for i = 0, n - 1 do
            if i > 0 then buf[pos] = 44; pos = pos + 1 end
            pos = put_num(buf, pos, out[i])
        end
    end
    ffi.copy(buf + pos, tail, #tail)
    return status, ffi.string(buf, pos + #tail)
end

---------------------------------------------------------------------------
-- the worker-thread path (mode = "thread"): runs in a pool thread's own Lua VM
---------------------------------------------------------------------------

local thread_entries = {}     -- in a thread VM: path -> entry
local thread_failed = {}      -- in a thread VM: path -> the file stamp that failed to load as asked

-- ngx.run_worker_thread(pool, "wisp.nginx", "thread_predict", name, path, stamp, checksum, device, kind,
-- body, max_rows) -> status, body, rows, bad rows, device, kernel ns, total ns.
-- The thread's VM scores with its own copy of exactly the version the request holds
-- (file stamp and header checksum): it (re)maps the file only when the stamp asked for
-- differs from its copy's, and keeps the copy only when the file is that version. When it
-- cannot (the file was renamed over since, or is broken) the status is 0: "stale", and
-- the worker scores the request inline with the entry it holds; the same file is not
-- tried again by this VM until it changes.
function M.thread_predict(name, path, stamp, checksum, device, kind, body, max_rows)
    load_libs()
    if not engine then
        local err
        engine, err = new_engine(1)
        if not engine then return 503, cjson.encode { error = "engine: " .. tostring(err) } .. "\n", 0, 0, "", 0, 0 end
    end
    local e = thread_entries[path]
    if not e or e.stamp ~= stamp or e.checksum ~= checksum then
        local now = file_stamp(path)
        if now == nil or now ~= stamp or thread_failed[path] == now then return 0, "", 0, 0, "", 0, 0 end
        local ne = open_entry(name, path, device)
        if not ne or ne.stamp ~= stamp or ne.checksum ~= checksum then
            if ne then ne:close() end
            thread_failed[path] = now
            return 0, "", 0, 0, "", 0, 0
        end
        if e then e:close() end
        thread_entries[path] = ne
        thread_failed[path] = nil
        e = ne
    end
    local b = e.batch
    b:clear()
    local n, errs, bad, extra = parse_into(e, b, kind, body, max_rows)
    if not n then
        local t = { error = bad }
        if extra then for k, v in pairs(extra) do t[k] = v end end
        return errs, cjson.encode(clean_strings(t, 0)) .. "\n", 0, 0, "", 0, 0
    end
    if n > e.outcap then e.outcap = n; e.out = float_buf(n) end
    local out, err = e.session:score(b, e.out)
    if not out then return 500, cjson.encode { error = tostring(err) } .. "\n", n, 0, "", 0, 0 end
    local dev = e.session:last_device()
    local st = last_stages(e.session)
    local status, text = encode_answer(e, n, out, bad, errs, dev)
    return status, text, n, errs and #errs or 0, dev, st.ns_kernel, st.ns_total
end

---------------------------------------------------------------------------
-- metrics: per-worker accumulators, flushed to the shared dict
---------------------------------------------------------------------------

local acc = {}                -- key -> amount since the last flush
local BATCH_BUCKETS = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384 }
local TIME_BUCKETS = { 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2,
                       0.1, 0.25, 0.5, 1, 2.5 }
local HIST = {
    wisp_batch_rows = { help = "rows per scored batch", buckets = BATCH_BUCKETS },
    wisp_event_loop_lag_seconds = { help = "how late each worker's lag timer fires (every lag_check_s): "
                                          .. "time its event loop spent on other work or off the CPU",
                                    buckets = { 1e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.5, 1 } },
    wisp_request_seconds = { help = "request latency inside the handler (body read to answer)", buckets = TIME_BUCKETS },
    wisp_stage_seconds = { help = "time per stage of each scored batch (parse: body to batch; h2d/kernel/d2h/sync/total: the session's profile)", buckets = TIME_BUCKETS },
}
local COUNTER_HELP = {
    wisp_requests_total = "HTTP requests by model, endpoint and status code",
    wisp_rows_total = "rows received in predict requests",
    wisp_row_errors_total = "rows answered with a null prediction (malformed input)",
    wisp_errors_total = "requests refused, by kind",
    wisp_model_reloads_total = "model (re)loads by result (ok; failed: the file did not load; refused: changed in place)",
    wisp_fallbacks_total = "batches moved from a GPU to the CPU",
    wisp_batcher_rejected_total = "single rows refused because the batcher queue was full",
}

local inc_keys = {}
local function inc(name, labels, n)
    local byl = inc_keys[name]
    if not byl then byl = {}; inc_keys[name] = byl end
    local k = byl[labels]
    if not k then k = name .. "\t" .. labels; byl[labels] = k end
    acc[k] = (acc[k] or 0) + (n or 1)
end

-- A histogram series (name + labels), made once: bucket counts and sum since the last
-- flush in a Lua array (no string keys on the request path), with its shared-dict keys.
local series_by = {}          -- name -> labels -> series
local series_all = {}         -- every series of this worker, for flush()
local function series(name, labels)
    local byl = series_by[name]
    if not byl then byl = {}; series_by[name] = byl end
    local sr = byl[labels]
    if not sr then
        local buckets = HIST[name].buckets
        local base = name .. "\t" .. labels
        sr = { buckets = buckets, nb = #buckets, counts = {}, keys = {}, sum = 0, sumkey = base .. "\tsum" }
        for j = 1, #buckets + 1 do sr.counts[j] = 0; sr.keys[j] = base .. "\t" .. j end
        byl[labels] = sr
        series_all[#series_all + 1] = sr
    end
    return sr
end

local function hobserve(sr, v)
    local buckets, nb = sr.buckets, sr.nb
    local i = nb + 1
    for j = 1, nb do if v <= buckets[j] then i = j; break end end
    local counts = sr.counts
    counts[i] = counts[i] + 1
    sr.sum = sr.sum + v
end

local function observe(name, labels, v) return hobserve(series(name, labels), v) end

-- The request path only records (series, value) pairs; they are sorted into buckets at
-- each flush (every flush_s, and before /metrics answers) in one loop that the JIT
-- compiles: the bucket search per value is a loop with an early exit, which LuaJIT leaves
-- to its interpreter when each run of it is short (8 values a request: ~3 µs).
local PENDING_MAX = 16384
local pend_sr, pend_v, pend_n = {}, ffi.new("double[?]", PENDING_MAX + 1), 0

local function drain_pending()
    local n = pend_n
    pend_n = 0
    for k = 1, n do hobserve(pend_sr[k], pend_v[k]) end
end

local function record(sr, v)
    local n = pend_n + 1
    pend_sr[n] = sr
    pend_v[n] = v
    pend_n = n
    if n >= PENDING_MAX then drain_pending() end
end

local gauges = {}             -- key -> value (set, not added)

function M.flush()
    drain_pending()
    if not cfg then return end
    local dict = ngx.shared[cfg.shm]
    if not dict then return end
    for k, v in pairs(acc) do
        if v ~= 0 then
            local ok, err = dict:incr(k, v, 0)
            if not ok then ngx.log(ngx.WARN, "wisp: metrics: ", err) end
        end
        acc[k] = nil
    end
    for _, sr in ipairs(series_all) do
        local counts, keys = sr.counts, sr.keys
        for j = 1, sr.nb + 1 do
            local v = counts[j]
            if v ~= 0 then
                local ok, err = dict:incr(keys[j], v, 0)
                if not ok then ngx.log(ngx.WARN, "wisp: metrics: ", err) end
                counts[j] = 0
            end
        end
        if sr.sum ~= 0 then dict:incr(sr.sumkey, sr.sum, 0); sr.sum = 0 end
    end
    for k, v in pairs(gauges) do dict:set(k, v); gauges[k] = nil end
end

-- label text 'model="m"[,extra]', memoised (the hot path builds no strings for metrics)
local lbl_cache = {}
local function lbl(model, extra)
    local byx = lbl_cache[model]
    if not byx then byx = {}; lbl_cache[model] = byx end
    local k = extra or ""
    local l = byx[k]
    if not l then
        l = extra and fmt('model="%s",%s', model, extra) or fmt('model="%s"', model)
        byx[k] = l
    end
    return l
end
local STAGE_LABEL = {}
for _, stg in ipairs { "ns_h2d", "ns_kernel", "ns_d2h", "ns_sync", "ns_total" } do STAGE_LABEL[stg] = 'stage="' .. stg:sub(4) .. '"' end

local function esc(s) return (tostring(s):gsub('[\\"]', "\\%0"):gsub("\n", "\\n")) end

-- The Prometheus text of every worker's metrics.
function M.metrics_text()
    M.flush()
    local dict = ngx.shared[cfg.shm]
    local keys = dict:get_keys(0)
    table.sort(keys)
    local counters, hists, gaugev = {}, {}, {}
    for _, k in ipairs(keys) do
        local v = dict:get(k)
        local name, labels, rest = k:match("^([^\t]+)\t([^\t]*)\t?(.*)$")
        if name == "g" then
            gaugev[#gaugev + 1] = { labels, rest, v }
        elseif name and HIST[name] then
            local h = hists[name] or {}
            hists[name] = h
            local s = h[labels] or { counts = {}, sum = 0 }
            h[labels] = s
            if rest == "sum" then s.sum = v else s.counts[tonumber(rest)] = v end
        elseif name then
            local c = counters[name] or {}
            counters[name] = c
            c[#c + 1] = { labels, v }
        end
    end
    local out = {}
    local function add(s) out[#out + 1] = s end
    local cnames = {}
    for name in pairs(COUNTER_HELP) do cnames[#cnames + 1] = name end
    table.sort(cnames)
    for _, name in ipairs(cnames) do
        add(fmt("# HELP %s %s\n# TYPE %s counter\n", name, COUNTER_HELP[name], name))
        for _, c in ipairs(counters[name] or {}) do add(fmt("%s{%s} %.17g\n", name, c[1], c[2])) end
    end
    local hnames = {}
    for name in pairs(HIST) do hnames[#hnames + 1] = name end
    table.sort(hnames)
    for _, name in ipairs(hnames) do
        local H = HIST[name]
        add(fmt("# HELP %s %s\n# TYPE %s histogram\n", name, H.help, name))
        local labs = {}
        for l in pairs(hists[name] or {}) do labs[#labs + 1] = l end
        table.sort(labs)
        for _, l in ipairs(labs) do
            local s = hists[name][l]
            local cum = 0
            local sep = l ~= "" and "," or ""
            for i = 1, #H.buckets + 1 do
                cum = cum + (s.counts[i] or 0)
                local le = H.buckets[i] and fmt("%.6g", H.buckets[i]) or "+Inf"
                add(fmt('%s_bucket{%s%sle="%s"} %d\n', name, l, sep, le, cum))
            end
            local ls = l ~= "" and "{" .. l .. "}" or ""
            add(fmt("%s_sum%s %.9g\n%s_count%s %d\n", name, ls, s.sum, name, ls, cum))
        end
    end
    -- gauges: per model, set by the workers (the last writer wins; workers agree)
    add("# HELP wisp_device_info the device each model scores on (value 1)\n# TYPE wisp_device_info gauge\n")
    add("# HELP wisp_model_ready 1 when the model is loaded and its device usable\n# TYPE wisp_model_ready gauge\n")
    for _, g in ipairs(gaugev) do
        local kind, labels = g[1], g[2]
        if kind == "device" then add(fmt('wisp_device_info{%s,device="%s"} 1\n', labels, esc(g[3])))
        elseif kind == "ready" then add(fmt("wisp_model_ready{%s} %s\n", labels, tostring(g[3])))
        elseif kind == "version" then add(fmt('wisp_model_version_info{%s,version="%s"} 1\n', labels, esc(g[3]))) end
    end
    return concat(out)
end

local function set_gauges(slot)
    local e = slot.cur
    local l = lbl(slot.name)
    gauges["g\tready\t" .. l] = e and 1 or 0
    if e then
        gauges["g\tdevice\t" .. l] = e.session and e.session:last_device() ~= "" and e.session:last_device() or e.device or "?"
        gauges["g\tversion\t" .. l] = e.version
    end
end

---------------------------------------------------------------------------
-- configuration, worker start, reload
---------------------------------------------------------------------------

-- configure{models = "name=path,..." or {name = path}, device=, mode=, batching=, ...}
-- In init_by_lua: records options only (see the top of this file).
function M.configure(opts)
    if type(opts) ~= "table" then error("wisp.nginx.configure: options table expected", 2) end
    local c = {}
    for k, v in pairs(DEFAULTS) do c[k] = v end
    for k, v in pairs(opts) do
        if DEFAULTS[k] == nil and k ~= "models" then error("wisp.nginx.configure: unknown option '" .. tostring(k) .. "'", 2) end
        c[k] = v
    end
    c.models = parse_models(opts.models)
    if not MODES[c.mode] and c.mode ~= "device" then
        error("wisp.nginx.configure: mode: device, inline, thread, async or auto expected, got " .. tostring(c.mode), 2)
    end
    for _, k in ipairs { "cpu_mode", "gpu_mode" } do
        if not MODES[c[k]] then
            error("wisp.nginx.configure: " .. k .. ": inline, thread, async or auto expected, got " .. tostring(c[k]), 2)
        end
    end
    if c.admin ~= "open" and c.admin ~= "separate" then
        error("wisp.nginx.configure: admin: open or separate expected, got " .. tostring(c.admin), 2)
    end
    if c.batching == "on" or c.batching == "1" then c.batching = true
    elseif c.batching == "off" or c.batching == "0" then c.batching = false end
    for _, k in ipairs { "max_rows_per_request", "batch_max_rows", "batch_max_delay_us", "batch_queue",
                         "reload_check_s", "engine_threads", "flush_s", "lag_check_s", "thread_min_bytes", "thread_slots" } do
        c[k] = tonumber(c[k]) or error("wisp.nginx.configure: " .. k .. ": number expected", 2)
    end
    cfg = c
    return true
end

local function log(level, ...)
    if ngx and ngx.log then ngx.log(level, "wisp: ", ...) end
end

-- The batcher's runtime: batcher.ngx_runtime() with sleeps and timed waits of at least 1 ms. ngx.sleep has
-- millisecond resolution: a wait under 1 ms becomes ngx.sleep(0), which in Debian's nginx
-- (no OpenResty "delayed events" patch) logs a warning per call, and the batcher's wait
-- for its deadline would spin through such zero sleeps. So a batch leaves after
-- max(max_delay_us, 1 ms) unless it fills (max_rows) first.
local function ms_runtime(batcher)
    local rt = batcher.ngx_runtime()
    local ceil, max = math.ceil, math.max
    local sleep = ngx.sleep
    rt.name = "ngx (1 ms sleeps)"
    rt.sleep_us = function(us) sleep(max(1, ceil(us / 1000)) / 1000) end
    local wait = rt.wait
    -- wait(tk, 0) means "one tick" (ngx.sleep(0) in batcher.ngx_runtime): 1 ms here
    rt.wait = function(tk, timeout_us)
        if timeout_us ~= nil and timeout_us < 1000 then timeout_us = 1000 end
        return wait(tk, timeout_us)
    end
    return rt
end

local function attach_batcher(e)
    local want = cfg.batching
    if want == "auto" then want = e.device ~= nil and e.device:match("^gpu") ~= nil end
    if not want then return true end
    local batcher = require "wisp.batcher"
    local s, err = e.model:session(e.device_asked)
    if not s then return nil, err end
    C.wisp_session_set_profiling(s._h, 1)
    e.bsession = s
    local name = e.name
    -- the batcher's target: the session, with every batch observed for the metrics
    local target = { model = e.model }
    function target.score(_, b, out)
        local r, rows = s:score(b, out)
        if r then
            observe("wisp_batch_rows", lbl(name, 'path="batcher"'), rows)
            local st = last_stages(s)
            for _, stg in ipairs(STAGES) do
                observe("wisp_stage_seconds", lbl(name, STAGE_LABEL[stg]), st[stg] / 1e9)
            end
        end
        return r, rows
    end
    local b, berr = batcher.new { session = target, runtime = ms_runtime(batcher), max_rows = cfg.batch_max_rows,
                                  max_delay_us = cfg.batch_max_delay_us, max_queue = cfg.batch_queue }
    if not b then return nil, berr end
    e.batcher = b
    return true
end

-- (Re)load one model slot. force (a :reload request): try even a file that failed before.
-- -> true[, "unchanged"] or nil, err. Debounced: a file whose stat identity (inode,
-- size, mtime) and header checksum are the serving version's is not mapped again
-- ("unchanged"); a file changed in place (the serving version's inode, with another
-- size, mtime or checksum: cp over it, truncate, a few bytes rewritten) is refused
-- without being read, since the serving copy is what was verified and a file being
-- written in place may be half-written; the refusal is logged once per state of the
-- file and reported in /v1/models/NAME ("file") and /readyz.
local function reload_slot(slot, force, why)
    local stamp, info = file_stamp(slot.path)
    if stamp == nil and not force then
        if not slot.missing_logged then
            log(ngx.ERR, "model '", slot.name, "': ", slot.path, " is missing; keeping the loaded version")
            slot.missing_logged = true
        end
        slot.file_state = slot.cur and { state = "missing; the loaded version keeps serving", serving = slot.cur.version } or nil
        return true
    end
    slot.missing_logged = nil
    local cur = slot.cur
    if cur and stamp ~= nil then
        if stamp == cur.stamp and header_checksum(slot.path) == cur.checksum then
            slot.file_state = nil
            return true, "unchanged"
        end
        if info.inode and cur.file.inode == info.inode and cur.file.dev == info.dev then
            local reason
            if cur.model and cur.model.file_changed then
                local okc, changed, what = pcall(cur.model.file_changed, cur.model)
                if okc and changed then reason = what end
            end
            reason = reason or fmt("%s (inode %d) was changed in place: size %d -> %d", slot.path, info.inode,
                                   cur.file.size, info.size)
            local err = "changed in place, refused: " .. reason .. "; replace a model file by rename (mv) in its directory"
            if slot.inplace_stamp ~= stamp then
                slot.inplace_stamp = stamp
                slot.failures = (slot.failures or 0) + 1
                inc("wisp_model_reloads_total", lbl(slot.name, 'result="refused"'))
                log(ngx.ERR, "model '", slot.name, "': ", err, "; version ", cur.version, " keeps serving")
            end
            slot.reload_error = { error = err, at = ngx.now(), file_stamp = stamp }
            slot.file_state = { state = err, serving = cur.version }
            return nil, err
        end
    end
    slot.inplace_stamp = nil
    if not force and stamp ~= nil and slot.failed_stamp == stamp then return true end   -- reported already
    local t0 = clock()
    local e, err = open_entry(slot.name, slot.path, slot.device, cfg)
    if e then
        local ok, berr = attach_batcher(e)
        if not ok then e:close(); e, err = nil, "batcher: " .. tostring(berr) end
    end
    if not e then
        slot.failed_stamp = stamp
        slot.reload_error = { error = tostring(err), at = ngx.now(), file_stamp = stamp }
        slot.file_state = slot.cur and { state = "failed to load, refused: " .. tostring(err), serving = slot.cur.version } or nil
        slot.failures = (slot.failures or 0) + 1
        inc("wisp_model_reloads_total", lbl(slot.name, 'result="failed"'))
        log(ngx.ERR, "model '", slot.name, "': ", slot.cur and "reload failed, the loaded version keeps serving: "
            or "load failed: ", err)
        set_gauges(slot)
        return nil, err
    end
    local old = slot.cur
    slot.cur = e
    slot.failed_stamp = nil
    slot.reload_error = nil
    slot.file_state = nil
    slot.loads = (slot.loads or 0) + 1
    e.loaded_at = ngx.now()
    inc("wisp_model_reloads_total", lbl(slot.name, 'result="ok"'))
    log(ngx.NOTICE, "model '", slot.name, "' ", old and "reloaded" or "loaded", " (", why or "start", "): ", slot.path,
        " version ", e.version, " on ", e.device, fmt(" in %.1f ms", (clock() - t0) * 1e3))
    if old then
        old.retired = true
        if old.inflight <= 0 then old:close() end
    end
    set_gauges(slot)
    return true
end

local function check_all(premature)
    if premature then return end
    local dict = ngx.shared[cfg.shm]
    for _, name in ipairs(model_names) do
        local slot = models[name]
        local gen = dict and dict:get("gen\t" .. name) or 0
        if gen ~= slot.gen then
            slot.gen = gen
            reload_slot(slot, true, "reload request")
        else
            reload_slot(slot, false, "file changed")
        end
    end
end

-- init_worker_by_lua: this worker's engine, models and timers.
function M.init_worker()
    if not cfg then error("wisp.nginx.init_worker: configure{} was not called in init_by_lua", 2) end
    load_libs()
    init_body_ptr()
    local err
    engine, err = new_engine(cfg.engine_threads)
    if not engine then log(ngx.ERR, "engine: ", err) end
    local dict = ngx.shared[cfg.shm]
    if not dict then log(ngx.ERR, "lua_shared_dict '", cfg.shm, "' is not declared: no metrics, no :reload") end
    for _, m in ipairs(cfg.models) do
        local slot = { name = m.name, path = m.path, device = m.device or cfg.device,
                       gen = dict and dict:get("gen\t" .. m.name) or 0 }
        models[m.name] = slot
        model_names[#model_names + 1] = m.name
        if engine then reload_slot(slot, true, "start") end
    end
    if cfg.mode == "device" then
        -- the default: the faster mode measured on the device the models landed on
        -- (scripts/results/bench_nginx-*.json): cpu_mode = inline on a CPU (scoring in the
        -- event loop costs least), gpu_mode = auto on a GPU (100-row requests: 1.58M rows/s
        -- auto against 0.92M inline on the H200). Decided once, as the worker starts, from
        -- the devices the models loaded then landed on (or, not loaded, were asked for).
        local gpu = false
        for _, name in ipairs(model_names) do
            local slot = models[name]
            local dev = slot.cur and slot.cur.device or slot.device
            if type(dev) == "string" and dev:match("^gpu") then gpu = true end
        end
        cfg.mode = gpu and cfg.gpu_mode or cfg.cpu_mode
        cfg.mode_by_device = true
        log(ngx.NOTICE, "mode ", cfg.mode, " (the default for ", gpu and "a GPU" or "the CPU", "; set mode to choose)")
    end
    if cfg.mode == "thread" or cfg.mode == "auto" then
        -- at most thread_slots calls in the pool at once per worker: lua-nginx-module makes a
        -- Lua VM for every queued call (and each VM maps and checks the model once), so an
        -- unbounded queue would make a VM, and a model load, per concurrent request
        thread_sema = require("ngx.semaphore").new(cfg.thread_slots)
    end
    if engine then
        ngx.timer.every(cfg.reload_check_s, check_all)
        ngx.timer.every(cfg.flush_s, function(premature)
            for _, name in ipairs(model_names) do set_gauges(models[name]) end
            M.flush()
        end)
        if cfg.lag_check_s > 0 then
            -- the event loop's lag: how late a timer every lag_check_s fires. A request scored
            -- inline, a long GC step, or the worker's core taken by another task; a stall of d
            -- is seen when a tick falls in it (at 10 ms, every stall over 10 ms is). nginx
            -- timers count milliseconds: up to ~1 ms late is their resolution. Each tick costs
            -- a few µs (lua-nginx-module runs a timer in a coroutine of its own).
            local lag_sr = series("wisp_event_loop_lag_seconds", "")
            local due = clock() + cfg.lag_check_s
            ngx.timer.every(cfg.lag_check_s, function(premature)
                if premature then return end
                local now = clock()
                local lag = now - due
                hobserve(lag_sr, lag > 0 and lag or 0)
                due = now + cfg.lag_check_s
            end)
        end
    end
end

---------------------------------------------------------------------------
-- request handling
---------------------------------------------------------------------------

-- The answer, with its length: no chunked encoding, and an answer over postpone_output
-- (1460 bytes) leaves in one writev (chunked, its last chunk would take a second one).
local function send(status, body, ctype)
    ngx.status = status
    local h = ngx.header
    h["Content-Type"] = ctype or "application/json"
    h["Content-Length"] = #body
    ngx.print(body)
    return status
end

local function send_json(status, t)
    return send(status, cjson.encode(clean_strings(t, 0)) .. "\n")
end

local function fail(status, msg, extra)
    local t = { error = msg }
    if extra then for k, v in pairs(extra) do t[k] = v end end
    return send_json(status, t)
end

local function method_not_allowed(allow)
    ngx.header["Allow"] = allow
    return fail(405, "method " .. ngx.req.get_method() .. " not allowed here (use " .. allow .. ")")
end

-- FIFO of submitted batches on a session (mode = "async"): each light thread waits
-- only for its own batch, completing older ones (and waking their owners) on the way.
local function score_async(e, b, out)
    local s = e.session
    local ok, err = s:submit(b, out)
    if not ok then return nil, err end
    local q = e.pending
    if not q then q = { first = 1, last = 0 }; e.pending = q end
    local tk = { done = false }
    q.last = q.last + 1
    q[q.last] = tk
    ngx.sleep(0)                               -- let other requests run while the device works
    while not tk.done do
        local head = q[q.first]
        local done, werr = s:wait()
        q[q.first] = nil
        q.first = q.first + 1
        head.done, head.err = true, (not done) and tostring(werr) or nil
        if head.sema then head.sema:post(1) end
        if not tk.done then
            tk.sema = tk.sema or require("ngx.semaphore").new(0)
            tk.sema:wait(60)
        end
    end
    if tk.err then return nil, tk.err end
    return out
end

local function get_batch(e)
    local pool = e.pool
    if pool and #pool > 0 then local b = pool[#pool]; pool[#pool] = nil; return b end
    return assert(engine:batch())
end

local function put_batch(e, b)
    if e.closed then b:close(); return end
    e.pool = e.pool or {}
    b:clear()
    e.pool[#e.pool + 1] = b
end

-- Content-Type header -> "json" | "libsvm" | false (and the media type), memoised (a
-- client sends the same few headers; the memo is bounded)
local ctype_memo, ctype_memo_n = {}, 0
local function body_kind(raw)
    local m = ctype_memo[raw]
    if m ~= nil then return m, nil end
    local ctype = raw:lower():match("^%s*([^;%s]+)") or ""
    local kind = false
    if ctype == "application/json" then kind = "json"
    elseif ctype == "text/plain" or ctype == "text/x-libsvm" then kind = "libsvm"
    elseif ctype == "application/x-ndjson" or ctype == "application/jsonl" then kind = "jsonl" end
    if kind and ctype_memo_n < 64 then ctype_memo[raw] = kind; ctype_memo_n = ctype_memo_n + 1 end
    return kind, ctype
end

-- the histogram series a model's inline predict path observes, resolved once per model
local function predict_series(slot)
    local ps = slot.series
    if not ps then
        local name = slot.name
        ps = { parse = series("wisp_stage_seconds", lbl(name, 'stage="parse"')),
               rows = series("wisp_batch_rows", lbl(name, 'path="direct"')),
               request = series("wisp_request_seconds", lbl(name)), stages = {}, stage_idx = {} }
        for i, stg in ipairs(STAGES) do
            ps.stages[i] = series("wisp_stage_seconds", lbl(name, STAGE_LABEL[stg]))
            ps.stage_idx[i] = stage_index(stg)
        end
        slot.series = ps
    end
    return ps
end

local predict_entry

local function predict(slot, name, method)
    if method ~= "POST" then return method_not_allowed("POST") end
    local kind, ctype = body_kind(ngx.var.content_type or "")
    if not kind then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "unsupported Content-Type '" .. ctype .. "' (use application/json, application/x-ndjson, application/jsonl, text/plain or text/x-libsvm)")
    end
    local enc = ngx.var.http_content_encoding
    if enc and enc ~= "" and enc:lower() ~= "identity" then
        inc("wisp_errors_total", 'kind="unsupported_media_type"')
        return fail(415, "Content-Encoding " .. enc .. " is not supported (send the body uncompressed)")
    end
    if not slot.cur then
        inc("wisp_errors_total", 'kind="not_ready"')
        return fail(503, "model '" .. name .. "' is not loaded", { reload_error = slot.reload_error and slot.reload_error.error })
    end
    ngx.req.read_body()
    -- libsvm and JSON lines go to the C parsers straight from nginx's body buffer (no Lua
    -- string: no copy, no interning, no garbage); JSON, the thread pool and a body in a
    -- temporary file take the Lua string
    local mode = cfg.mode
    local body, blen
    if body_ptr and kind ~= "json" and mode ~= "thread" then body, blen = body_ptr() end
    if body == nil then
        body = ngx.req.get_body_data()
        if not body then
            local file = ngx.req.get_body_file()
            if file then
                local f = io.open(file, "rb")
                if f then body = f:read("*a"); f:close() end
            end
        end
        blen = body and #body or 0
    end
    if blen == 0 then
        inc("wisp_errors_total", 'kind="empty_body"')
        return fail(400, "empty request body")
    end
    -- the version that answers: the entry serving now that the body is here (reading it
    -- yields: a reload may have swapped the entry meanwhile), held (inflight) until the
    -- answer is made, whatever the mode waits for, and released on every path
    local e = slot.cur
    if not e then
        inc("wisp_errors_total", 'kind="not_ready"')
        return fail(503, "model '" .. name .. "' is not loaded", { reload_error = slot.reload_error and slot.reload_error.error })
    end
    e.inflight = e.inflight + 1
    local ok, status = pcall(predict_entry, e, slot, name, kind, body, blen, mode)
    e:release()
    if not ok then
        inc("wisp_errors_total", 'kind="internal"')
        return fail(500, "internal error: " .. tostring(status))
    end
    return status
end

-- predict's work on the entry e it holds: parse, score, answer (-> the status sent)
predict_entry = function(e, slot, name, kind, body, blen, mode)
    local max_rows = cfg.max_rows_per_request
    local t0 = clock()                       -- request latency and the parse stage start here

    if mode == "thread" or (mode == "auto" and blen >= cfg.thread_min_bytes) then
        if type(body) ~= "string" then body = ffi.string(body, blen) end
        local got, werr = thread_sema:wait(10)
        if not got then
            inc("wisp_errors_total", 'kind="thread_busy"')
            return fail(503, "worker threads busy: " .. tostring(werr))
        end
        local ok, status, text, n, nbad, dev, kns, tns = ngx.run_worker_thread(cfg.thread_pool, "wisp.nginx",
            "thread_predict", name, e.path, e.stamp, e.checksum, e.device_asked, kind, body, max_rows)
        thread_sema:post(1)
        if ok and status == 0 then
            -- the thread's VM could not map this exact version (the file at the path is
            -- another one now, or broken): this worker scores it inline, with the entry it holds
            inc("wisp_errors_total", 'kind="thread_stale"')
            ok, mode = false, "inline"
        elseif ok then
            if n and n > 0 then
                inc("wisp_rows_total", lbl(name), n)
                if nbad > 0 then inc("wisp_row_errors_total", lbl(name), nbad) end
                observe("wisp_batch_rows", lbl(name, 'path="thread"'), n)
                observe("wisp_stage_seconds", lbl(name, 'stage="kernel"'), kns / 1e9)
                observe("wisp_stage_seconds", lbl(name, 'stage="total"'), tns / 1e9)
            end
            return send(status, text)
        elseif mode ~= "inline" then           -- (inline: the stale version above, this request only)
            if not (cfg.mode_by_device and tostring(status):find("not found", 1, true)) then
                inc("wisp_errors_total", 'kind="thread"')
                return fail(500, "worker thread: " .. tostring(status))
            end
            -- the mode was the device's default (mode = "device"), not asked for, and nginx.conf
            -- has no such thread pool: this worker scores inline from now on, this request too,
            -- and says so once
            log(ngx.WARN, "mode ", cfg.mode, " (the default on this device) needs `thread_pool ", cfg.thread_pool,
                " threads=2;` in nginx.conf (", tostring(status), "): scoring inline")
            cfg.mode, mode = "inline", "inline"
        end
    end

    local b = get_batch(e)
    local ps = predict_series(slot)
    -- raw rows stay raw (wisp_session_score_raw: fused on a GPU) unless mode = async
    -- (session:submit takes a batch)
    local ok, n, errs, bad, extra = pcall(parse_into, e, b, kind, body, max_rows, mode ~= "async", blen)
    if not ok then
        put_batch(e, b)
        return fail(500, "internal error: " .. tostring(n))
    end
    if not n then
        put_batch(e, b)
        inc("wisp_errors_total", errs == 413 and 'kind="too_many_rows"' or errs == 400 and 'kind="bad_request"'
            or errs == 415 and 'kind="unsupported_media_type"' or 'kind="internal"')
        return fail(errs, bad, extra)
    end
    local raw = extra == true               -- the rows are in e.tr, not yet transformed
    if raw and n == 1 and e.batcher and not (bad and bad[0]) then
        -- one row for the batcher, which takes feature ids: transform it here
        local rc = C.wisp_transform(e.tr._h, b._h)
        if rc ~= 0 then
            put_batch(e, b)
            return fail(500, "transform: " .. c_error(rc))
        end
        errs, bad = batch_bad_rows(b, true)
        if kind == "json" then errs = instance_errors(errs, inst_firsts(), inst_starts()) end
        raw = false
    end
    record(ps.parse, clock() - t0)
    inc("wisp_rows_total", lbl(name), n)
    if errs and #errs > 0 then inc("wisp_row_errors_total", lbl(name), #errs) end

    local status, text
    if n == 1 and e.batcher and not raw and not (bad and bad[0]) then
        -- one row: coalesced with the other single-row requests of this worker
        -- the row as the batcher takes it, in each of the batch's value modes (wisp.h): no
        -- vals (every feature binary), vals without val_ptr (every feature valued: what the
        -- libsvm parser makes of "1 1:0.5", and batch:add of ids with vals), or mixed (the
        -- first val_ptr[1] - val_ptr[0] features valued, the rest binary)
        local csr = b:csr()
        local ids, vals, bids = csr.ids, nil, nil
        if csr.vals then
            if csr.val_ptr then
                local nv = csr.val_ptr[2] - csr.val_ptr[1]
                if nv > 0 then
                    local v, bb = {}, {}
                    for k = 1, #ids do if k <= nv then v[k] = ids[k] else bb[#bb + 1] = ids[k] end end
                    ids, vals, bids = v, csr.vals, bb
                end
            else
                vals = csr.vals
            end
        end
        local p, err = e.batcher:score(ids, vals, bids)
        put_batch(e, b)
        if p == nil then
            if tostring(err):find("queue full", 1, true) then
                inc("wisp_batcher_rejected_total", lbl(name))
                return fail(503, tostring(err))
            end
            return fail(500, tostring(err))
        end
        local one = ffi.new("float[1]", p)
        status, text = encode_answer(e, 1, one, bad, errs, e.bsession:last_device())
    else
        if n > e.outcap then e.outcap = n * 2; e.out = float_buf(e.outcap) end
        local out, err
        local sh = e.session._h
        if cfg.mode == "async" then
            out = float_buf(n)
            out, err = score_async(e, b, out)
        else
            -- the C call straight (the checks of session:score are ours to make: b is
            -- this entry's engine's batch, e.out holds n floats)
            local rc
            if raw then rc = C.wisp_session_score_raw(sh, e.tr._h, e.out)
            else rc = C.wisp_session_score(sh, b._h, e.out) end
            if rc == 0 then out = e.out else err = c_error(rc) end
            if out and raw then
                -- a row the transform found bad (not bad in the raw batch) scores NaN:
                -- rare, so only then is the CPU transform run, for its messages
                local nb0, explained = errs and #errs or 0, false
                for i = 0, n - 1 do
                    local p = out[i]
                    if p ~= p and not (bad and bad[i]) then
                        if not explained then
                            explained = true
                            if C.wisp_transform(e.tr._h, b._h) == 0 then
                                local terrs, tbad = batch_bad_rows(b, true)
                                -- an {"instances"} body: said in its terms (the scanner's
                                -- buffers still hold this body's: nothing yielded since)
                                if kind == "json" then terrs = instance_errors(terrs, inst_firsts(), inst_starts()) end
                                if terrs then errs, bad = terrs, tbad end
                            end
                        end
                        if not (bad and bad[i]) then
                            errs, bad = errs or {}, bad or {}
                            errs[#errs + 1] = { index = i, error = "the row scored NaN" }
                            bad[i] = true
                        end
                    end
                end
                if explained and #errs > nb0 then inc("wisp_row_errors_total", lbl(name), #errs - nb0) end
            end
        end
        if not out then
            put_batch(e, b)
            inc("wisp_errors_total", 'kind="score"')
            return fail(500, "score: " .. tostring(err))
        end
        record(ps.rows, n)
        local stages, sidx = ps.stages, ps.stage_idx
        record(stages[1], tonumber(C.wisp_session_last_stat(sh, sidx[1])) * 1e-9)
        record(stages[2], tonumber(C.wisp_session_last_stat(sh, sidx[2])) * 1e-9)
        record(stages[3], tonumber(C.wisp_session_last_stat(sh, sidx[3])) * 1e-9)
        record(stages[4], tonumber(C.wisp_session_last_stat(sh, sidx[4])) * 1e-9)
        record(stages[5], tonumber(C.wisp_session_last_stat(sh, sidx[5])) * 1e-9)
        status, text = encode_answer(e, n, out, bad, errs, ffi.string(C.wisp_session_last_device(sh)))
        put_batch(e, b)
    end
    if status ~= 200 then inc("wisp_errors_total", 'kind="all_rows_bad"') end
    record(ps.request, clock() - t0)
    return send(status, text)
end

local function model_meta(slot)
    local e = slot.cur
    local t = { name = slot.name, path = slot.path, ready = e ~= nil, mode = cfg.mode,
                mode_chosen_by = cfg.mode_by_device and "device" or "configuration",
                device = { requested = slot.device } }
    local r = { loads = slot.loads or 0, failures = slot.failures or 0, check_interval_s = cfg.reload_check_s }
    if slot.reload_error then r.error = slot.reload_error.error; r.error_at = slot.reload_error.at end
    t.reload = r
    -- the file at the path against the version serving: "serving" when they are the same
    -- file, else what is wrong with it (changed in place, failed to load, missing)
    t.file = slot.file_state or (e and { state = "serving", serving = e.version }) or { state = "not loaded" }
    if e then
        t.version = { id = e.version, checksum = e.checksum, mtime = e.file.mtime, size = e.file.size,
                      inode = e.file.inode, loaded_at = e.loaded_at }
        t.features = e.info.num_features
        t.dtype = e.info.dtype
        t.bias = e.info.bias
        t.meta = e.info.meta
        t.device.in_use = e.session and e.session:last_device() or e.device
        t.device.gpu_status = engine:gpu_status()
        t.batching = e.batcher and e.batcher:policy() or false
        if e.spec then
            t.input = "json rows or JSON lines (application/x-ndjson) of raw features (the columns' inputs), or libsvm lines of feature ids"
            t.inputs = e.inputs
            t.columns = e.slices
        else
            t.input = 'json rows {"ids": [...], "vals": [...]}, or libsvm lines of feature ids'
            t.columns = cjson.empty_array
        end
    end
    return t
end

local function ready_status()
    local all = true
    local list = {}
    for _, name in ipairs(model_names) do
        local slot = models[name]
        local e = slot.cur
        local ok = e ~= nil and e.session ~= nil
        if not ok then all = false end
        list[name] = { ready = ok, device = e and e.device or nil,
                       error = (not ok and slot.reload_error) and slot.reload_error.error or nil,
                       -- still ready (a verified version serves), but the file is not it
                       warning = (ok and slot.file_state) and slot.file_state.state or nil,
                       serving = ok and e.version or nil }
    end
    return all and #model_names > 0, list
end

-- the label text of wisp_requests_total for (model, verb, status), memoised
local req_labels = {}
local function request_label(name, verb, status)
    local k = req_labels[name]
    if not k then k = {}; req_labels[name] = k end
    local byv = k[verb]
    if not byv then byv = {}; k[verb] = byv end
    local l = byv[status]
    if not l then
        l = lbl(name, fmt('endpoint="%s",code="%d"', verb == "" and "meta" or verb:sub(2), status))
        byv[status] = l
    end
    return l
end

-- uri -> {name, verb} of /v1/models/NAME[:VERB], memoised (bounded: a client sends a few)
local route_memo, route_memo_n = {}, 0

-- an admin endpoint asked for on a listener that does not serve them (admin = "separate")
local function admin_only(what)
    inc("wisp_errors_total", 'kind="admin_only"')
    return fail(403, what .. " is served on the admin listener only (configure{admin = \"separate\"}: "
        .. "the server block whose handler is handle(true), serve.sh --admin-port)")
end

-- content_by_lua: the whole service (routes above). admin: this listener serves the admin
-- endpoints (:reload, /metrics) also when configure{admin = "separate"}.
function M.handle(admin)
    local uri = ngx.var.uri
    local method = ngx.req.get_method()
    local closed = cfg.admin == "separate" and not admin
    if uri == "/healthz" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        return send_json(200, { status = "ok", worker = ngx.worker.id(), pid = ngx.worker.pid() })
    elseif uri == "/readyz" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        local ok, list = ready_status()
        return send_json(ok and 200 or 503, { ready = ok, models = list })
    elseif uri == "/metrics" then
        if closed then return admin_only("/metrics") end
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        return send(200, M.metrics_text(), "text/plain; version=0.0.4")
    elseif uri == "/v1/models" or uri == "/v1/models/" then
        if method ~= "GET" and method ~= "HEAD" then return method_not_allowed("GET, HEAD") end
        local list = {}
        for _, name in ipairs(model_names) do list[#list + 1] = model_meta(models[name]) end
        return send_json(200, { models = list })
    end
    local name, verb
    local rt = route_memo[uri]
    if rt then
        name, verb = rt[1], rt[2]
    else
        name, verb = uri:match("^/v1/models/([^/:]+)(:?[%w_]*)$")
        if name and route_memo_n < 256 then route_memo[uri] = { name, verb }; route_memo_n = route_memo_n + 1 end
    end
    if not name then
        inc("wisp_errors_total", 'kind="not_found"')
        return fail(404, "no such endpoint: " .. (#uri > 200 and uri:sub(1, 200) .. "..." or uri), { endpoints = { "POST /v1/models/NAME:predict",
            "GET /v1/models/NAME", "POST /v1/models/NAME:reload", "GET /healthz", "GET /readyz", "GET /metrics" } })
    end
    local slot = models[name]
    if not slot then
        inc("wisp_errors_total", 'kind="unknown_model"')
        return fail(404, "unknown model '" .. name .. "'", { models = model_names })
    end
    local status
    if verb == ":predict" then
        status = predict(slot, name, method)
    elseif verb == "" then
        if method ~= "GET" and method ~= "HEAD" then status = method_not_allowed("GET, HEAD")
        else status = send_json(200, model_meta(slot)) end
    elseif verb == ":reload" then
        if closed then status = admin_only("POST /v1/models/NAME:reload")
        elseif method ~= "POST" then status = method_not_allowed("POST")
        else
            local dict = ngx.shared[cfg.shm]
            local gen = dict and dict:incr("gen\t" .. name, 1, 0) or 0
            slot.gen = gen
            local ok, err = reload_slot(slot, true, "reload request")
            if ok and err == "unchanged" then
                status = send_json(200, { reloaded = false, unchanged = true, model = model_meta(slot) })
            elseif ok then
                status = send_json(200, { reloaded = true, model = model_meta(slot) })
            else
                status = fail(500, "reload failed; the loaded version keeps serving: " .. tostring(err),
                              { model = model_meta(slot) })
            end
        end
    else
        inc("wisp_errors_total", 'kind="not_found"')
        status = fail(404, "unknown verb '" .. verb .. "' (use :predict or :reload)")
    end
    inc("wisp_requests_total", request_label(name, verb, status or 0))
    return status
end

-- error_page 413 target (nginx refused a body over client_max_body_size): a JSON answer.
-- (nginx's other own errors answer JSON from examples/openresty/errors.conf, without Lua.)
function M.too_large()
    inc("wisp_errors_total", 'kind="body_too_large"')
    return fail(413, "request body too large (client_max_body_size)")
end

-- For tests: the state of this worker.
function M._state() return { cfg = cfg, models = models, engine = engine } end

return M
