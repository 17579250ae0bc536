-- wrk_post_v2.lua — a wrk script for scripts/bench/bench_nginx_v2.sh: POST one body file with an optional
-- Inference-Header-Content-Length (the v2 binary tensor data extension); prints a "WRK {...}" JSON line.
--   wrk -t1 -c8 -d5s -s scripts/bench/wrk_post_v2.lua URL -- BODY_FILE CONTENT_TYPE [HEADER_LENGTH]
-- (spec/nginx/wrk_post.lua is the v1 benchmark's script; this one adds the header, nothing else.)
function init(args)
    local f = assert(io.open(args[1], "rb"))
    wrk.method = "POST"
    wrk.body = f:read("*a")
    f:close()
    wrk.headers["Content-Type"] = args[2] or "application/json"
    local h = tonumber(args[3] or "")
    if h and h > 0 then wrk.headers["Inference-Header-Content-Length"] = tostring(h) end
end

function done(summary, latency, requests)
    local e = summary.errors
    local secs = summary.duration / 1e6
    io.write(string.format('WRK {"requests": %d, "seconds": %.3f, "rps": %.1f, "non2xx": %d, "socket_errors": %d, '
        .. '"p50_us": %d, "p99_us": %d, "mean_us": %.1f}\n',
        summary.requests, secs, summary.requests / secs, e.status, e.connect + e.read + e.write + e.timeout,
        latency:percentile(50), latency:percentile(99), latency.mean))
end
