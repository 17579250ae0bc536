-- placement_calibrate.lua — wisp.calibrate and placement.auto_policy: measured points into a policy.
--
-- wisp.calibrate times each device over a sweep of batch sizes (interleaved passes, refined
-- around each change of the fastest device); placement.auto_policy takes the "auto" device's
-- own measured points.
-- What is timed here is the caller's own sessions, with the caller's batches (opts.batches)
-- or random ones of the model's row width; how the passes become points and points become
-- breaks is the core's (placement_policy.lua: wisp_placement_summarize, _acceptable,
-- _choose), the same rule the "auto" device calibrates with (engine/score/autoplace.c).
local ffi = require "ffi"
local wisp = require "wisp"
local base = require "wisp.base"
local P = require "wisp.placement_policy"
local C = base.C

local floor, max, min, huge = math.floor, math.max, math.min, math.huge
local fmt, sort = string.format, table.sort
local type, ipairs, tostring, tonumber = type, ipairs, tostring, tonumber
local getmetatable, error, pcall = getmetatable, error, pcall

local R = P._rule
local fastest, acceptable, n_acceptable = R.fastest, R.acceptable, R.n_acceptable
local is_device, now_ns, median = P.is_device, P.now_ns, P.median

local M = {}

-- The features a row of this model has: opts.features, the model's meta
-- "features_per_row", its feature columns (one feature per column), else 39 (Criteo).
local function row_width(model, opts)
    if opts.features then return opts.features end
    local m = model:meta("features_per_row")
    if m and tonumber(m) then return tonumber(m) end
    local info = model:info()
    if info.columns then
        -- the description as C decoded it (wisp_columns_from_model; nil for a text it refuses)
        local desc = require("wisp.columns").from_model(model)
        local n = desc and desc:count() or 0
        if n > 0 then return n end
    end
    return 39
end
M.row_width = row_width

-- xorshift32: deterministic, fast under the JIT
local function rng(seed)
    local bit = require "bit"
    local bxor, lshift, rshift = bit.bxor, bit.lshift, bit.rshift
    local x = seed ~= 0 and seed or 2463534242
    return function()
        x = bxor(x, lshift(x, 13)); x = bxor(x, rshift(x, 17)); x = bxor(x, lshift(x, 5))
        return x % 4294967296
    end
end
M.rng = rng

-- Random builder batches (pinned when a GPU is live): `count` batches of `rows` rows of
-- `width` features, the first third valued, ids uniform over the model's features.
function M.random_batches(eng, num_features, rows, width, count, seed)
    local nv = floor(width / 3)
    local nb = width - nv
    local ids = ffi.new("uint64_t[?]", width)
    local vals = ffi.new("float[?]", max(nv, 1))
    local r = rng(seed or 12345)
    local list = {}
    for k = 1, count do
        local b = assert(wisp.batch(eng))
        local h = b._h
        for _ = 1, rows do
            for j = 0, width - 1 do ids[j] = r() % num_features end
            for j = 0, nv - 1 do vals[j] = (r() % 1000) / 250 end
            local rc = C.wisp_batch_add_row_mixed(h, ids, vals, nv, ids + nv, nb)
            if rc ~= 0 then error(base.last_error(rc, "calibrate: building a batch")) end
        end
        list[k] = b
    end
    return list
end

-- The usable devices of an engine: "cpu" and "gpu:N" for each usable GPU.
function M.usable_devices(eng)
    local list = eng:devices()
    local out = {}
    for _, d in ipairs(list) do
        if d.kind == "cpu" or d.usable then out[#out + 1] = d.name end
    end
    return out, list.gpu_status
end

-- Median time (ns) of one session:score call over rotating batches (one device, passes in a row).
local function time_calls(sess, batches, out, repeats, min_ns, warm)
    local k, nb = 1, #batches
    for _ = 1, warm do
        assert(sess:score(batches[k], out))
        k = k % nb + 1
    end
    local per = {}
    for rep = 1, repeats do
        local calls, t0 = 0, now_ns()
        local t
        repeat
            local ok, err = sess:score(batches[k], out)
            if not ok then error("calibrate: " .. tostring(err)) end
            k = k % nb + 1
            calls = calls + 1
            t = now_ns() - t0
        until t >= min_ns
        per[rep] = t / calls
    end
    return median(per)
end
M.time_calls = time_calls

-- One timed pass of a session: ns a call over calls for at least min_ns, batches rotated
-- from position k, after one untimed call (the first after the other devices' passes).
-- Returns ns a call and the next position.
local function time_pass(sess, batches, out, k, min_ns)
    local nb = #batches
    local ok, err = sess:score(batches[k], out)
    if not ok then error("calibrate: " .. tostring(err), 0) end
    k = k % nb + 1
    local calls, t0 = 0, now_ns()
    local t
    repeat
        ok, err = sess:score(batches[k], out)
        if not ok then error("calibrate: " .. tostring(err), 0) end
        k = k % nb + 1
        calls = calls + 1
        t = now_ns() - t0
    until t >= min_ns
    return t / calls, k
end
M.time_pass = time_pass

-- The sizes of a sweep: whole numbers >= 1, sorted, each once (nil, why: not a list of them).
local function check_sizes(sizes)
    if type(sizes) ~= "table" or #sizes == 0 then return nil, "sizes: a non-empty list of batch sizes expected" end
    local out, seen = {}, {}
    for i, s in ipairs(sizes) do
        if type(s) ~= "number" or s < 1 or s ~= floor(s) or s == huge then
            return nil, fmt("sizes[%d]: a whole number >= 1 expected, got %s", i, tostring(s))
        end
        if not seen[s] then seen[s] = true; out[#out + 1] = s end
    end
    sort(out)
    return out
end

-- M.sweep(measure, devices, sizes[, opts]) -> points, refined: what calibrate measures, apart
-- from the timing itself (so a spec can drive it with any measure).
--   measure(size, n) -> {device = {n pass times, ms}}: n passes of every device at `size`,
--             interleaved (pass 1 of each device, then pass 2 of each, ...)
-- Every size gets opts.repeats passes a device (5); a point where more than one device is
-- acceptable (the choice rule: their bands overlap) gets more, opts.repeats at a time, up to
-- opts.max_repeats (3 x repeats), so a close call rests on more passes. Then, between two
-- neighbouring measured sizes whose fastest device (by median) differs, other than within
-- the spread (each end's fastest acceptable at the other end: then either is fine at both),
-- the geometric middle is measured, and again in each half where it still differs, until the bracket
-- is within opts.refine_ratio (1.25) or opts.refine_levels (8) deep, at most opts.max_points
-- (64) sizes in all. opts.refine = false: the sizes only. opts.progress(size, device, ms,
-- point) after each point. refined: the sizes the refinement added, in the order measured.
function M.sweep(measure, devices, sizes, opts)
    opts = opts or {}
    local list, why = check_sizes(sizes)
    if not list then error("calibrate: " .. why, 2) end
    local repeats = opts.repeats or 5
    local max_repeats = max(repeats, opts.max_repeats or 3 * repeats)
    local ratio = opts.refine_ratio or 1.25
    local levels = opts.refine_levels or 8
    local max_points = opts.max_points or 64
    local points, refined = {}, {}
    local function point(size)
        local passes = {}
        for _, d in ipairs(devices) do passes[d] = {} end
        local p
        repeat
            local want = min(repeats, max_repeats - #passes[devices[1]])
            local got = measure(size, want)
            for _, d in ipairs(devices) do
                local l = type(got) == "table" and got[d]
                if type(l) ~= "table" or #l ~= want then
                    error(fmt("calibrate: measure(%d, %d) gave %s pass times for '%s'", size, want,
                              type(l) == "table" and tostring(#l) or "no", d), 0)
                end
                for _, v in ipairs(l) do
                    if type(v) ~= "number" or v < 0 or v ~= v or v == huge then
                        error(fmt("calibrate: measure(%d, %d) gave a bad time for '%s': %s", size, want, d,
                                  tostring(v)), 0)
                    end
                    passes[d][#passes[d] + 1] = v
                end
            end
            local ms, spread = {}, {}
            for _, d in ipairs(devices) do ms[d], spread[d] = P.summarize(passes[d]) end
            p = { rows = size, ms = ms, spread = spread, passes = #passes[devices[1]] }
        until n_acceptable(p, devices) <= 1 or p.passes >= max_repeats
        points[#points + 1] = p
        if opts.progress then for _, d in ipairs(devices) do opts.progress(size, d, p.ms[d], p) end end
        return p
    end
    local coarse = {}
    for i, s in ipairs(list) do coarse[i] = point(s) end
    -- the fastest device changes between a and b, and not merely within the spread (where
    -- each end's fastest is acceptable at the other end, either device is fine at both)
    local function changes(a, b)
        local fa, fb = fastest(a, devices), fastest(b, devices)
        return fa ~= fb and not (acceptable(a, devices, fb) and acceptable(b, devices, fa))
    end
    local function refine(a, b, level)
        if opts.refine == false or level > levels or b.rows / a.rows <= ratio or #points >= max_points then return end
        local m = floor(math.sqrt(a.rows * b.rows) + 0.5)
        if m <= a.rows or m >= b.rows then return end
        local pm = point(m)
        refined[#refined + 1] = m
        if changes(a, pm) then refine(a, pm, level + 1) end
        if changes(pm, b) then refine(pm, b, level + 1) end
    end
    for i = 1, #coarse - 1 do
        if changes(coarse[i], coarse[i + 1]) then refine(coarse[i], coarse[i + 1], 1) end
    end
    sort(points, function(a, b) return a.rows < b.rows end)
    return points, refined
end

-- wisp.calibrate(model[, opts]) -> policy or nil, err.
-- Measures session:score on every usable device of the model's engine (the CPU and each
-- usable GPU; a session each) over a sweep of batch sizes, at the model's own row width,
-- with prebuilt batches rotated so every call sees fresh rows. The devices are timed
-- interleaved, one pass each in turn (cpu, gpu:0, cpu, gpu:0, ...), so drift and other
-- processes' load hit all of them alike; each point keeps the median and the spread
-- (quartiles, extremes) of its passes. After the sizes, the sizes around each change of
-- the fastest device are measured too (M.sweep: geometric middles until the bracket is
-- within 1.25x), and the breaks follow the choice rule (see "policies" above), which
-- policy:check() verifies. opts:
--   sizes     batch sizes (default 1, 10, 100, 1k, 10k, 100k, 200k)
--   devices   devices to compare (default: cpu and each usable gpu:N), each once
--   features  features a row (default: see row_width)
--   repeats   timed passes a device per size (default 5; 3 with quick)
--   max_repeats  passes a device where the devices are within each other's spread
--             (default 3 x repeats; 2 x with quick)
--   min_ms    each pass runs calls for at least this long (default 10; 3 with quick)
--   refine    false: the sizes only (default: refine around each crossover)
--   refine_ratio  refine until the bracket is within this ratio (default 1.25)
--   max_rows_built  rows of batches built per size (default 400k), at most 16 batches a size
--   batches   function(size) -> a list of batches of that size to time (yours: real rows),
--             or nil for random ones; the caller keeps ownership. Called for refined sizes too.
--   quick     fewer, shorter passes
--   progress  function(size, device, ms, point) called after each point
function M.calibrate(model, opts)
    if getmetatable(model) ~= wisp.Model then
        error("bad argument #1 to 'calibrate' (model expected, got " .. type(model) .. ")", 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then
        error("bad argument #2 to 'calibrate' (table expected, got " .. type(opts) .. ")", 2)
    end
    local eng = model.engine
    eng:gpu_count()                                      -- the backend live: builder batches are pinned
    local devices = opts.devices
    if not devices then devices = M.usable_devices(eng) end
    local dup = {}
    for i, d in ipairs(devices) do
        if not is_device(d) then
            error(fmt("bad argument #2 to 'calibrate' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2)
        end
        if dup[d] then error(fmt("bad argument #2 to 'calibrate' (devices[%d]: '%s' twice)", i, d), 2) end
        dup[d] = true
    end
    local sizes, why = check_sizes(opts.sizes or { 1, 10, 100, 1000, 10000, 100000, 200000 })
    if not sizes then error("bad argument #2 to 'calibrate' (" .. why .. ")", 2) end
    local width = row_width(model, opts)
    local nf = model:num_features()
    local repeats = opts.repeats or (opts.quick and 3 or 5)
    local max_repeats = max(repeats, opts.max_repeats or (opts.quick and 2 or 3) * repeats)
    local min_ns = (opts.min_ms or (opts.quick and 3 or 10)) * 1e6
    local budget = opts.max_rows_built or 400000
    local ratio = opts.refine_ratio or 1.25
    local sessions = {}
    for i, d in ipairs(devices) do
        local s, err = model:session(d)
        if not s then
            for _, o in ipairs(sessions) do o:close() end
            return nil, "calibrate: " .. tostring(err)
        end
        sessions[i] = s
    end
    local maxs = sizes[#sizes]
    local out_keep = ffi.new("float[?]", maxs)
    local out = ffi.cast("float *", out_keep)           -- a pointer: session:score's JIT-friendly path
    -- the batches of the size being measured (measure is called for one size at a time)
    local cur_size, cur, own, pos = nil, nil, false, {}
    local function release()
        if own then for _, b in ipairs(cur) do b:close() end end
        cur_size, cur, own = nil, nil, false
    end
    local function batches_of(size)
        if size == cur_size then return cur end
        release()
        collectgarbage()
        local bs = opts.batches and opts.batches(size)
        if bs then own = false
        else
            bs, own = M.random_batches(eng, nf, size, width, max(1, min(16, floor(budget / size))), 1000 + size), true
        end
        if type(bs) ~= "table" or #bs == 0 then error(fmt("calibrate: batches(%d) gave no batches", size), 0) end
        cur_size, cur = size, bs
        for i, s in ipairs(sessions) do                 -- warm-up: weights on the device, buffers of this size
            for w = 1, 2 do
                local ok, err = s:score(bs[(w - 1) % #bs + 1], out)
                if not ok then error("calibrate: " .. tostring(err), 0) end
            end
            pos[i] = 1
        end
        return bs
    end
    local function measure(size, n)
        local bs = batches_of(size)
        local res = {}
        for _, d in ipairs(devices) do res[d] = {} end
        for rep = 1, n do
            for i, d in ipairs(devices) do
                local t
                t, pos[i] = time_pass(sessions[i], bs, out, pos[i], min_ns)
                res[d][rep] = t / 1e6
            end
        end
        return res
    end
    local ok, points, refined = pcall(M.sweep, measure, devices, sizes, {
        repeats = repeats, max_repeats = max_repeats, refine = opts.refine, refine_ratio = ratio,
        refine_levels = opts.refine_levels, max_points = opts.max_points, progress = opts.progress })
    release()
    for _, s in ipairs(sessions) do s:close() end
    out_keep = nil
    if not ok then return nil, tostring(points) end
    local _, gpu_status = M.usable_devices(eng)
    return P.policy { devices = devices, points = points,
                      machine = { cpu_threads = eng:threads(), gpu_status = gpu_status },
                      model = { num_features = nf, features_per_row = width, dtype = model:dtype() },
                      date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                      options = { repeats = repeats, max_repeats = max_repeats, min_ms = min_ns / 1e6,
                                  interleaved = true, sizes = sizes, refined = refined,
                                  refine_ratio = opts.refine ~= false and ratio or nil } }
end

-- placement.auto_policy(session[, context]) -> policy or nil, err: the "auto" device's own
-- calibration of the session's model (wisp_session_auto_points: probes of 1, 2, 4 ... 16384
-- rows of 39 features, the CPU and the GPUs timed interleaved in the background) as a
-- policy of the devices "cpu" and "gpus", in rows of 39 features. context: "pool" (the
-- CPU's pool, estimated: how a caller outside the engine's pool scores; the default) or
-- "one" (one thread: how a task of the pool scores). Its last break to "gpus", times 39, is
-- the crossover the auto device routes by (wisp_session_auto_state). nil, err while the
-- model is not calibrated yet, or when nothing was measured (no GPU answered, or
-- WISP_AUTO_MIN_NNZ fixed the crossover).
local AUTO_WIDTH = 39
function M.auto_policy(session, context)
    if getmetatable(session) ~= wisp.Session or session._h == nil then
        error("bad argument #1 to 'auto_policy' (an open session expected)", 2)
    end
    context = context or "pool"
    if context ~= "pool" and context ~= "one" then
        error("bad argument #2 to 'auto_policy' ('pool' or 'one' expected, got " .. tostring(context) .. ")", 2)
    end
    local n = ffi.new("size_t[1]")
    local rc = C.wisp_session_auto_points(session._h, 0, n, nil, nil, nil, nil)
    if rc ~= 0 then return nil, base.last_error(rc, "auto_policy") end
    local np = tonumber(n[0])
    if np == 0 then
        return nil, "auto_policy: the auto device measured nothing (no GPU answered, or WISP_AUTO_MIN_NNZ fixed "
                    .. "its crossover)"
    end
    local rows = ffi.new("uint64_t[?]", np)
    local one, pool, gpus = ffi.new("double[?]", 3 * np), ffi.new("double[?]", 3 * np), ffi.new("double[?]", 3 * np)
    rc = C.wisp_session_auto_points(session._h, np, n, rows, one, pool, gpus)
    if rc ~= 0 then return nil, base.last_error(rc, "auto_policy") end
    local cpu = context == "one" and one or pool
    local points = {}
    for k = 0, np - 1 do
        points[k + 1] = { rows = tonumber(rows[k]),
                          ms = { cpu = cpu[3 * k], gpus = gpus[3 * k] },
                          spread = { cpu = { lo = cpu[3 * k + 1], hi = cpu[3 * k + 2] },
                                     gpus = { lo = gpus[3 * k + 1], hi = gpus[3 * k + 2] } } }
    end
    local eng = session.engine
    local _, gpu_status = M.usable_devices(eng)
    return P.policy { devices = { "cpu", "gpus" }, points = points,
                      machine = { cpu_threads = eng:threads(), gpu_status = gpu_status },
                      model = { num_features = session.model:num_features(), features_per_row = AUTO_WIDTH },
                      date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                      options = { source = "auto", context = context, interleaved = true } }
end

return M
