-- bench_nginx_peer.lua — the in-process peer of scripts/bench/bench_nginx.sh: the same request bodies parsed and scored in one process.
--   wisp run scripts/bench/bench_nginx_peer.lua MODEL BODY.libsvm DEVICE SECONDS
-- Prints "PEER {...}": rows/s for parse+score of the body (what one request costs the
-- service, minus HTTP and JSON), and for scoring the pre-parsed batch alone.
local wisp = require "wisp"
local C = require "wisp.cdef"
local path, body_path, device, secs = arg[1], arg[2], arg[3] or "cpu", tonumber(arg[4] or 3)
local eng = assert(wisp.engine { threads = 1 })
local model = assert(wisp.load(path, { engine = eng }))
local s = assert(model:session(device))
local text = assert(io.open(body_path, "rb")):read("*a")
local b = assert(eng:batch())
local out = require("ffi").new("float[?]", 100000)
local function now() return tonumber(C.wisp_clock_ns()) / 1e9 end
local function run(parse)
    local rows, calls = 0, 0
    b:clear(); b:parse_libsvm(text)
    local c0 = os.clock()
    local t0 = now()
    local t_end = t0 + secs
    repeat
        for _ = 1, 50 do
            if parse then b:clear(); b:parse_libsvm(text) end
            local _, n = assert(s:score(b, out))
            rows = rows + n; calls = calls + 1
        end
    until now() >= t_end
    local dt = now() - t0
    return rows / dt, calls / dt, rows / (os.clock() - c0)
end
local rps_ps, cps_ps, rpc_ps = run(true)
local rps_s, cps_s = run(false)
io.write(string.format('PEER {"device": "%s", "rows_per_request": %d, "parse_score_rows_per_s": %.1f, "parse_score_calls_per_s": %.1f, '
    .. '"parse_score_rows_per_cpu_s": %.1f, "score_rows_per_s": %.1f, "score_calls_per_s": %.1f}\n',
    s:last_device(), b:rows(), rps_ps, cps_ps, rpc_ps, rps_s, cps_s))
