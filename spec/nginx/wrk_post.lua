-- wrk_post.lua — a wrk script: POST one body file; prints a "WRK {...}" JSON line of counts and latency percentiles.
--   wrk -t2 -c8 -d5s -s spec/nginx/wrk_post.lua URL -- BODY_FILE CONTENT_TYPE [ROWS_PER_REQUEST (unused)]
--       [THINK_MS] [MAX_PER_THREAD] [HEADER_LENGTH]
-- THINK_MS > 0: each connection waits an exponentially distributed time of that mean (in
-- whole milliseconds, wrk's resolution) before each request, to offer a chosen rate with
-- many connections (wrk2's constant rate is not packaged). MAX_PER_THREAD > 0: each wrk
-- thread stops after that many responses (the 1-million-request run). HEADER_LENGTH > 0: sent as
-- Inference-Header-Content-Length (v2's binary tensor data extension).
local rows, think, max_n, n = 1, 0, 0, 0
local log, floor, random = math.log, math.floor, math.random

function init(args)
    local f = assert(io.open(args[1], "rb"))
    wrk.method = "POST"
    wrk.body = f:read("*a")
    f:close()
    wrk.headers["Content-Type"] = args[2] or "application/json"
    rows = tonumber(args[3] or 1)
    think = tonumber(args[4] or 0)
    max_n = tonumber(args[5] or 0)
    local hlen = tonumber(args[6] or 0) or 0
    if hlen > 0 then wrk.headers["Inference-Header-Content-Length"] = tostring(hlen) end
    math.randomseed(os.time() + floor(os.clock() * 1e6))
    if max_n > 0 then
        response = function(status, headers, body)
            n = n + 1
            if n >= max_n then wrk.thread:stop() end
        end
    end
end

if true then
    delay = function()
        if think <= 0 then return 0 end
        return floor(-log(1 - random()) * think + 0.5)
    end
end

function done(summary, latency, requests)
    local e = summary.errors
    local secs = summary.duration / 1e6
    -- (done runs in wrk's main Lua state, where init never ran: rows are added by the caller)
    io.write(string.format('WRK {"requests": %d, "seconds": %.3f, "rps": %.1f, '
        .. '"non2xx": %d, "socket_errors": %d, "connect": %d, "read": %d, "write": %d, "timeout": %d, '
        .. '"p50_us": %d, "p90_us": %d, "p99_us": %d, "p999_us": %d, "max_us": %d, "mean_us": %.1f}\n',
        summary.requests, secs, summary.requests / secs,
        e.status, e.connect + e.read + e.write + e.timeout, e.connect, e.read, e.write, e.timeout,
        latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9),
        latency.max, latency.mean))
end
