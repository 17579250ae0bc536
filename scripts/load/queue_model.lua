-- queue_model.lua — the floor for bench_nginx's "p99 <= 3 x p50 at 80% of peak": an ideal FIFO queue with c servers, simulated (discrete events, seeded), printing sojourn-time percentiles and p99/p50.
--
-- usage: build/wisp run scripts/load/queue_model.lua [--servers C] [--rho R] [--arrivals poisson|const]
--            [--service det|exp|FILE] [--dispatch shared|random] [--n N] [--seed S] [--mean S]
--            [--delay D] [--json]
--        build/wisp run scripts/load/queue_model.lua --table [--n N] [--seed S] [--json]
--
-- The model: requests arrive at rate rho * C / mean_service, either as a Poisson stream
-- (exponential gaps: independent clients) or at a constant rate (every 1/rate: wrk2 -R,
-- loadgen --arrivals const). Each of the C servers (nginx workers) serves one request at a
-- time, first come first served, never idles while a request waits for it, and never stalls.
-- Two dispatch rules:
--   shared: one queue for all C servers (M/G/c): a request starts on the first server free;
--   random: each request picks a server uniformly at random and queues there (C independent
--           queues). Closer to nginx, where a keep-alive connection belongs to one worker and
--           a request waits for its connection's worker even when the other worker is idle.
-- Service times (the time a server needs for a request, waiting excluded):
--   det: all equal to --mean (default 1); exp: exponential of mean --mean;
--   FILE: an empirical distribution: numbers (any separators; '#' starts a comment), each
--         drawn with equal probability: e.g. latencies measured at low load, or evenly spaced
--         quantiles of them (bench_nginx.sh writes wrk's quantiles at 1 connection); with
--         --mean, scaled to that mean (the shape kept).
-- --delay D: a fixed time added to every request that occupies no server (loopback, kernel,
-- the client: what a latency measured at no load holds beyond the worker's CPU time); 0 by
-- default, and in --table.
-- Sojourn time = wait + service (+ delay), in the units of --mean (or of FILE). The first 1% of the
-- requests (at least 1000) warm the queue up and are not counted; then --n requests
-- (default 1,000,000) are. Percentiles are nearest-rank (p50, p90, p99, p99.9).
-- p99/p50 is scale-free: with det or exp service and no --delay it does not depend on --mean.
--
-- --table: p99/p50 for rho 0.5..0.9 over the standard cases (det/exp service, poisson/const
-- arrivals, 1 and 2 servers, both dispatch rules for 2): what an ideal server would show
-- at 80% of peak. As a module (the spec):
--   local Q = assert(loadfile("scripts/load/queue_model.lua"))("--module")
--   Q.simulate{ servers = 1, rho = 0.8, arrivals = "poisson", service = "exp", n = 200000, seed = 1 }
--     -> { p50, p90, p99, p999, max, mean, mean_wait, mean_service, p99_over_p50, ... }
local ffi = require "ffi"
local bit = require "bit"

local M = {}
local log, floor, ceil, max = math.log, math.floor, math.ceil, math.max
local bxor, rshift = bit.bxor, bit.rshift

-- splitmix64: a seeded stream of uniforms in (0, 1), independent of math.random
function M.rng(seed)
    local s = ffi.new("uint64_t[1]", (tonumber(seed) or 1) * 2654435761 + 12345)
    return function()
        local z = s[0] + 0x9E3779B97F4A7C15ULL
        s[0] = z
        z = bxor(z, rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
        z = bxor(z, rshift(z, 27)) * 0x94D049BB133111EBULL
        z = bxor(z, rshift(z, 31))
        return (tonumber(rshift(z, 11)) + 0.5) * 1.1102230246251565e-16    -- 2^-53
    end
end

-- the numbers of a file (whitespace, commas or semicolons between them; '#' comments)
function M.read_samples(path)
    local f, err = io.open(path, "rb")
    if not f then return nil, "queue_model: service file: " .. tostring(err) end
    local v = {}
    for line in f:lines() do
        line = line:gsub("#.*", "")
        for tok in line:gmatch("[^%s,;]+") do
            local x = tonumber(tok)
            if not x or x < 0 or x ~= x or x == math.huge then
                f:close()
                return nil, string.format("queue_model: service file %s: '%s' is not a number >= 0", path, tok)
            end
            v[#v + 1] = x
        end
    end
    f:close()
    if #v == 0 then return nil, "queue_model: service file " .. path .. ": no numbers" end
    return v
end

-- a service-time sampler: "det", "exp" (mean `mean`), or a list of samples (a Lua table)
local function sampler(service, mean, u01)
    if service == "det" then
        return function() return mean end, mean
    elseif service == "exp" then
        return function() return -mean * log(u01()) end, mean
    elseif type(service) == "table" then
        -- samples, rescaled to mean `mean` when one is given
        local m = #service
        if m == 0 then error("bad 'service' argument: an empty sample list", 3) end
        local a, sum = ffi.new("double[?]", m), 0
        for i = 1, m do a[i - 1] = service[i]; sum = sum + service[i] end
        if sum <= 0 then error("bad 'service' argument: the samples' mean is 0", 3) end
        if mean then
            for i = 0, m - 1 do a[i] = a[i] * mean * m / sum end
            sum = mean * m
        end
        return function() return a[floor(u01() * m)] end, sum / m
    end
    error("bad 'service' argument: det, exp or a list of samples", 3)
end

-- the k-th smallest (0-based) of a[lo..hi], in place: afterwards a[lo..k-1] <= a[k] <= a[k+1..hi]
-- (quickselect, three-way partition: all-equal inputs, as D/D/1's, take one pass)
local function select(a, lo, hi, k)
    while hi > lo do
        local x, y, z = a[lo], a[lo + floor((hi - lo) / 2)], a[hi]
        local p = (x < y) and ((y < z) and y or ((x < z) and z or x)) or ((x < z) and x or ((y < z) and z or y))
        local lt, i, gt = lo, lo, hi
        while i <= gt do
            local v = a[i]
            if v < p then a[i] = a[lt]; a[lt] = v; lt = lt + 1; i = i + 1
            elseif v > p then a[i] = a[gt]; a[gt] = v; gt = gt - 1
            else i = i + 1 end
        end
        if k < lt then hi = lt - 1 elseif k > gt then lo = gt + 1 else return a[k] end
    end
    return a[k]
end

-- nearest-rank percentiles of a[0..n-1] (reorders a); ps ascending, in percent
function M.percentiles(a, n, ps)
    local out, lo = {}, 0
    for j, p in ipairs(ps) do
        local k = ceil(p / 100 * n) - 1
        if k < 0 then k = 0 elseif k > n - 1 then k = n - 1 end
        if k < lo then k = lo end
        out[j] = select(a, lo, n - 1, k)
        lo = k
    end
    return out
end

-- one simulation; o = { servers, rho, arrivals = "poisson"|"const", service = "det"|"exp"|{samples},
-- dispatch = "shared"|"random", n, seed, mean, delay, warmup }
function M.simulate(o)
    local c = tonumber(o.servers or 1)
    local rho = tonumber(o.rho or 0.8)
    local n = floor(tonumber(o.n or 1000000))
    if not c or c < 1 or c ~= floor(c) then error("bad 'servers' argument: a whole number >= 1", 2) end
    if not rho or rho <= 0 or rho >= 1 then error("bad 'rho' argument: 0 < rho < 1", 2) end
    if n < 1 then error("bad 'n' argument: >= 1", 2) end
    local arrivals, dispatch = o.arrivals or "poisson", o.dispatch or "shared"
    if arrivals ~= "poisson" and arrivals ~= "const" then error("bad 'arrivals' argument: poisson or const", 2) end
    if dispatch ~= "shared" and dispatch ~= "random" then error("bad 'dispatch' argument: shared or random", 2) end
    local u01 = M.rng(o.seed or 1)
    local mean = o.mean and tonumber(o.mean)
    if o.mean and (not mean or mean <= 0) then error("bad 'mean' argument: > 0", 2) end
    if type(o.service) ~= "table" then mean = mean or 1 end
    local draw, mean_s = sampler(o.service or "det", mean, u01)
    local warm = o.warmup or max(1000, floor(n / 100))
    local delay = tonumber(o.delay or 0)
    if not delay or delay < 0 then error("bad 'delay' argument: >= 0", 2) end
    local gap = mean_s / (rho * c)                    -- mean time between arrivals
    local free = ffi.new("double[?]", c)              -- when each server is next free
    local soj = ffi.new("double[?]", n)
    local poisson, shared = arrivals == "poisson", dispatch == "shared"
    local t, sum_w, sum_s, sum_soj = 0, 0, 0, 0
    for i = 0, warm + n - 1 do
        if poisson then t = t - gap * log(u01()) else t = i * gap end
        local s = draw()
        local k = 0
        if shared then
            -- FIFO with one queue: a request starts on the server free first (arrivals in order)
            local best = free[0]
            for j = 1, c - 1 do if free[j] < best then best = free[j]; k = j end end
        else
            k = floor(u01() * c)
        end
        local start = free[k]
        if start < t then start = t end
        local done = start + s
        free[k] = done
        if i >= warm then
            soj[i - warm] = done - t + delay
            sum_w = sum_w + (start - t); sum_s = sum_s + s; sum_soj = sum_soj + (done - t + delay)
        end
    end
    local mx = 0
    for i = 0, n - 1 do if soj[i] > mx then mx = soj[i] end end
    local q = M.percentiles(soj, n, { 50, 90, 99, 99.9 })
    return { servers = c, rho = rho, arrivals = arrivals, dispatch = dispatch, n = n, warmup = warm,
             seed = o.seed or 1, service = type(o.service) == "table" and "samples" or (o.service or "det"),
             mean_service = mean_s, delay = delay, p50 = q[1], p90 = q[2], p99 = q[3], p999 = q[4], max = mx,
             mean = sum_soj / n, mean_wait = sum_w / n, measured_mean_service = sum_s / n,
             p99_over_p50 = q[3] / q[1] }
end

-- the standard cases of --table (c = 1: dispatch does not matter)
M.CASES = {}
for _, sd in ipairs { { 1, "shared" }, { 2, "shared" }, { 2, "random" } } do
    for _, service in ipairs { "det", "exp" } do
        for _, arrivals in ipairs { "const", "poisson" } do
            M.CASES[#M.CASES + 1] = { servers = sd[1], dispatch = sd[2], service = service, arrivals = arrivals }
        end
    end
end
M.RHOS = { 0.5, 0.6, 0.7, 0.8, 0.9 }

-- the notation of each case: A/S/c (D = deterministic, M = Markov), and the dispatch
local function kendall(cs)
    return string.format("%s/%s/%d", cs.arrivals == "const" and "D" or "M", cs.service == "det" and "D" or "M", cs.servers)
        .. (cs.servers > 1 and (cs.dispatch == "shared" and " shared" or " random") or "")
end

function M.table(n, seed)
    local rows = {}
    for _, cs in ipairs(M.CASES) do
        local row = { case = kendall(cs), servers = cs.servers, dispatch = cs.dispatch, service = cs.service,
                      arrivals = cs.arrivals, p99_over_p50 = {}, p50 = {}, p99 = {} }
        for j, rho in ipairs(M.RHOS) do
            local r = M.simulate { servers = cs.servers, rho = rho, arrivals = cs.arrivals, service = cs.service,
                                   dispatch = cs.dispatch, n = n, seed = seed }
            row.p99_over_p50[j], row.p50[j], row.p99[j] = r.p99_over_p50, r.p50, r.p99
        end
        rows[#rows + 1] = row
    end
    return rows
end

-- a small JSON writer (flat tables and arrays of numbers/strings; enough for this script's output)
local function json(v)
    local t = type(v)
    if t == "number" then
        if v ~= v or v == math.huge or v == -math.huge then return "null" end
        return (v == floor(v) and math.abs(v) < 1e15) and string.format("%d", v) or string.format("%.6g", v)
    elseif t == "string" then return string.format("%q", v):gsub("\\\n", "\\n")
    elseif t == "boolean" then return tostring(v)
    elseif t == "table" then
        if #v > 0 or next(v) == nil then
            local p = {}
            for i = 1, #v do p[i] = json(v[i]) end
            return "[" .. table.concat(p, ", ") .. "]"
        end
        local keys, p = {}, {}
        for k in pairs(v) do keys[#keys + 1] = k end
        table.sort(keys)
        for _, k in ipairs(keys) do p[#p + 1] = string.format("%q: %s", k, json(v[k])) end
        return "{" .. table.concat(p, ", ") .. "}"
    end
    return "null"
end
M.json = json

function M.main(args)
    local o = { servers = 2, rho = 0.8, arrivals = "poisson", service = "det", dispatch = "shared", n = 1000000, seed = 1 }
    local as_json, tbl, service_name = false, false, "det"
    local i = 1
    while i <= #args do
        local a = args[i]
        local function val()
            i = i + 1
            if args[i] == nil then error("queue_model: option " .. a .. " needs a value", 0) end
            return args[i]
        end
        local function num() local x = tonumber(val()); if not x then error("queue_model: " .. a .. ": a number", 0) end return x end
        if a == "--servers" then o.servers = num()
        elseif a == "--rho" then o.rho = num()
        elseif a == "--arrivals" then o.arrivals = val()
        elseif a == "--service" then service_name = val()
        elseif a == "--dispatch" then o.dispatch = val()
        elseif a == "--n" then o.n = num()
        elseif a == "--seed" then o.seed = num()
        elseif a == "--mean" then o.mean = num()
        elseif a == "--delay" then o.delay = num()
        elseif a == "--json" then as_json = true
        elseif a == "--table" then tbl = true
        elseif a == "-h" or a == "--help" then
            for line in io.lines(arg and arg[0] or "scripts/load/queue_model.lua") do
                if not line:match("^%-%-") then break end
                print((line:gsub("^%-%- ?", "")))
            end
            return 0
        else error("queue_model: unknown argument " .. a .. " (try --help)", 0) end
        i = i + 1
    end
    if tbl then
        local rows = M.table(o.n, o.seed)
        if as_json then
            io.write(json { model = "ideal FIFO queue, sojourn time p99/p50", n = o.n, seed = o.seed, rho = M.RHOS, cases = rows }, "\n")
            return 0
        end
        io.write(string.format("p99/p50 of the sojourn time (wait + service), ideal FIFO queue, %d requests a point, seed %d\n", o.n, o.seed))
        io.write(string.format("%-16s %-8s %-7s %-8s", "case", "service", "servers", "arrivals"))
        for _, rho in ipairs(M.RHOS) do io.write(string.format(" rho=%.1f", rho)) end
        io.write("   p50 and p99 at rho=0.8 (x mean service)\n")
        for _, r in ipairs(rows) do
            io.write(string.format("%-16s %-8s %-7d %-8s", r.case, r.service, r.servers, r.arrivals))
            for j = 1, #M.RHOS do io.write(string.format(" %7.2f", r.p99_over_p50[j])) end
            io.write(string.format("   %5.2f %6.2f\n", r.p50[4], r.p99[4]))
        end
        return 0
    end
    if service_name == "det" or service_name == "exp" then o.service = service_name
    else
        local v, err = M.read_samples(service_name)
        if not v then error(err, 0) end
        o.service = v
    end
    local ok, r = pcall(M.simulate, o)
    if not ok then error("queue_model: " .. tostring(r):gsub("^bad '(%w+)' argument", "--%1"), 0) end
    r.service = (service_name == "det" or service_name == "exp") and service_name or ("file:" .. service_name)
    if as_json then io.write(json(r), "\n"); return 0 end
    io.write(string.format("servers %d, rho %.3f, arrivals %s, service %s (mean %.6g), dispatch %s, delay %.6g, n %d, seed %d\n",
        r.servers, r.rho, r.arrivals, r.service, r.mean_service, r.dispatch, r.delay, r.n, r.seed))
    io.write(string.format("sojourn: p50 %.6g  p90 %.6g  p99 %.6g  p99.9 %.6g  max %.6g  mean %.6g (wait %.6g)\n",
        r.p50, r.p90, r.p99, r.p999, r.max, r.mean, r.mean_wait))
    io.write(string.format("p99/p50 %.3f\n", r.p99_over_p50))
    return 0
end

if ... == "--module" then return M end
M.main({ ... })
