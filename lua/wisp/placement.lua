-- placement.lua — where each stage (transform, score) runs: a device, a Lua function of the batch, or a calibrated policy (wisp.calibrate), applied per batch by a pipeline.
--
--   local policy = wisp.calibrate(model)              -- measures this machine, finds the crossover
--   policy:save("policy.json")                        -- or "policy.lua" (a Lua table literal)
--   local pipe = wisp.pipeline{ model = model, placement = policy }
--   pipe:score(batch)                                 -- the device is chosen for this batch
--   pipe:set_placement{ score = function(b) return b.rows < 5000 and "cpu" or "gpu:0" end }
--
-- A placement is, for each stage:
--   score      a device name ("cpu", "gpu", "gpu:N", "gpus", "gpus:N", "auto"), a function of the
--              batch info {rows=, nnz=, queue_depth=} returning one, or a policy object
--              (anything with :choose(info)). A bare string, function or policy stands
--              for {score = it}.
--   transform  the same, for a raw batch (pipe:score_raw(raw), pipe:transform(raw)): when it
--              names the GPU the score stage runs on too (gpu, gpu:N, gpus, auto), the
--              transform and the score run fused on that GPU (session:score_raw: only
--              the raw columns cross PCIe); otherwise raw rows are transformed on the
--              CPU and the batch is scored where the score stage says. A GPU transform
--              with the score elsewhere runs on the CPU (moving a session between
--              devices per batch would cost more than the transform); last_placement()
--              says where each stage ran. For pipe:score(batch) the rows came transformed
--              and the transform stage is only recorded.
-- The info table passed to functions is reused from batch to batch: read it, do not keep it.
-- Changing the placement (set_placement) takes effect on the next batch; the session
-- is moved (session:set_device) only when the chosen device differs from the last one.
local ffi = require "ffi"
local wisp = require "wisp"
local base = require "wisp.base"
local C = base.C

local floor, max, min, huge = math.floor, math.max, math.min, math.huge
local fmt, concat, sort = string.format, table.concat, table.sort
local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable, getmetatable, error, pcall = setmetatable, getmetatable, error, pcall

local M = {}
local Policy = {}; Policy.__index = Policy
local Pipeline = {}; Pipeline.__index = Pipeline
M.Policy, M.Pipeline = Policy, Pipeline

local function now_ns() return tonumber(C.wisp_clock_ns()) end
M.now_ns = now_ns

-- true for the device names wisp_session_set_device takes: C's grammar (wisp_device_parse),
-- parsed there once; else false and why
local function is_device(d)
    if type(d) ~= "string" then return false end
    local rc = C.wisp_device_parse(d, nil, nil)
    if rc == 0 then return true end
    return false, base.errmsg(rc)
end
M.is_device = is_device

local function median(t)
    local s = {}
    for i = 1, #t do s[i] = t[i] end
    sort(s)
    local n = #s
    if n == 0 then return nil end
    if n % 2 == 1 then return s[(n + 1) / 2] end
    return 0.5 * (s[n / 2] + s[n / 2 + 1])
end
M.median = median

---------------------------------------------------------------------------
-- policies: measured points -> the faster device per batch size
---------------------------------------------------------------------------

-- Time (ms) of device d at r rows: linear in rows between measured sizes (a batch costs
-- a fixed part plus a per-row part), the smallest size's time below it, the last
-- segment's line extended above the largest.
local function time_at(points, d, r)
    local n = #points
    if r <= points[1].rows then return points[1].ms[d] end
    for i = 1, n - 1 do
        local a, b = points[i], points[i + 1]
        if r <= b.rows then
            local f = (r - a.rows) / (b.rows - a.rows)
            return a.ms[d] + f * (b.ms[d] - a.ms[d])
        end
    end
    if n == 1 then return points[1].ms[d] * r / points[1].rows end
    local a, b = points[n - 1], points[n]
    local slope = (b.ms[d] - a.ms[d]) / (b.rows - a.rows)
    return b.ms[d] + slope * (r - b.rows)
end

local function best_at(points, devices, r)
    local bd, bt = nil, huge
    for _, d in ipairs(devices) do
        local t = time_at(points, d, r)
        if t ~= nil and t < bt then bd, bt = d, t end
    end
    return bd, bt
end

-- breaks: { {upto = R, device = D}, ... } meaning D for rows < R (the last upto = inf);
-- crossover: { {rows = R, from = D1, to = D2} } where the faster device changes.
local function derive(points, devices)
    sort(points, function(a, b) return a.rows < b.rows end)
    local cand = {}
    for i, p in ipairs(points) do
        cand[#cand + 1] = p.rows
        local q = points[i + 1]
        if q then   -- pairwise crossings of the devices' lines inside the segment
            for x = 1, #devices do
                for y = x + 1, #devices do
                    local dx, dy = devices[x], devices[y]
                    local d0 = p.ms[dx] - p.ms[dy]
                    local d1 = q.ms[dx] - q.ms[dy]
                    if d0 and d1 and d0 * d1 < 0 then
                        cand[#cand + 1] = p.rows + (q.rows - p.rows) * d0 / (d0 - d1)
                    end
                end
            end
        end
    end
    sort(cand)
    -- runs of the best device between candidate points (judged at each interval's middle)
    local segs = { { from = 0, device = best_at(points, devices, cand[1]) } }
    for i = 1, #cand do
        local lo, hi = cand[i], cand[i + 1]
        if not hi or hi > lo then
            local d = best_at(points, devices, hi and (lo + hi) / 2 or lo * 1.5)
            if d ~= segs[#segs].device then segs[#segs + 1] = { from = lo, device = d } end
        end
    end
    local breaks, crossover = {}, {}
    for i, sg in ipairs(segs) do
        local nxt = segs[i + 1]
        local at = nxt and max(1, floor(nxt.from + 0.5)) or huge
        breaks[i] = { upto = at, device = sg.device }
        if nxt then crossover[#crossover + 1] = { rows = at, from = sg.device, to = nxt.device } end
    end
    return breaks, crossover
end

local function new_policy(t)
    local p = setmetatable(t, Policy)
    p.breaks, p.crossover = derive(p.points, p.devices)
    return p
end

-- M.policy{devices = {"cpu", "gpu:0"}, points = { {rows = 10, ms = {cpu = 0.01, ["gpu:0"] = 0.02}}, ... }}
-- A policy from measured (or hand-written) points; every point needs a time for every device.
function M.policy(t)
    if type(t) ~= "table" then error("bad argument #1 to 'policy' (table expected, got " .. type(t) .. ")", 2) end
    local devices, points = t.devices, t.points
    if type(devices) ~= "table" or #devices == 0 then error("bad argument #1 to 'policy' (devices: a list of device names expected)", 2) end
    for i, d in ipairs(devices) do
        if not is_device(d) then error(fmt("bad argument #1 to 'policy' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2) end
    end
    if type(points) ~= "table" or #points == 0 then error("bad argument #1 to 'policy' (points: a non-empty list expected)", 2) end
    local copy = {}
    for i, p in ipairs(points) do
        if type(p) ~= "table" or type(p.rows) ~= "number" or p.rows < 1 or type(p.ms) ~= "table" then
            error(fmt("bad argument #1 to 'policy' (points[%d]: {rows = N >= 1, ms = {device = milliseconds}} expected)", i), 2)
        end
        local ms = {}
        for _, d in ipairs(devices) do
            local v = tonumber(p.ms[d])
            if not v or v < 0 or v ~= v then
                error(fmt("bad argument #1 to 'policy' (points[%d]: no time for device '%s')", i, d), 2)
            end
            ms[d] = v
        end
        copy[i] = { rows = p.rows, ms = ms }
    end
    local dev = {}
    for i, d in ipairs(devices) do dev[i] = d end
    return new_policy { kind = "calibrated", version = 1, devices = dev, points = copy,
                        machine = t.machine, model = t.model, date = t.date, options = t.options }
end

function M.is_policy(v) return getmetatable(v) == Policy end

-- The device for a batch of info.rows rows (a number works too).
function Policy:choose(info)
    local rows = type(info) == "number" and info or info.rows
    local b = self.breaks
    for i = 1, #b do
        if rows < b[i].upto then return b[i].device end
    end
    return b[#b].device
end

-- The predicted time (ms) of a batch of `rows` rows on device d (nil: every device, best first).
function Policy:predict(rows, d)
    if d then return time_at(self.points, d, rows) end
    return best_at(self.points, self.devices, rows)
end

-- The plain data of the policy (what save writes).
function Policy:to_table()
    local pts = {}
    for i, p in ipairs(self.points) do
        local ms = {}
        for k, v in pairs(p.ms) do ms[k] = v end
        pts[i] = { rows = p.rows, ms = ms }
    end
    local cross = {}
    for i, c in ipairs(self.crossover) do cross[i] = { rows = c.rows, from = c.from, to = c.to } end
    local dev = {}
    for i, d in ipairs(self.devices) do dev[i] = d end
    return { kind = "calibrated", version = 1, devices = dev, points = pts, crossover = cross,
             machine = self.machine, model = self.model, date = self.date, options = self.options }
end

-- A Lua table literal of v (sorted keys; numbers exact).
local function lua_literal(v, indent)
    indent = indent or ""
    local t = type(v)
    if t == "number" then
        if v == huge then return "math.huge" end
        if v == floor(v) and v > -2^53 and v < 2^53 then return fmt("%d", v) end
        return fmt("%.17g", v)
    elseif t == "string" then return fmt("%q", v)
    elseif t == "boolean" then return tostring(v)
    elseif t == "table" then
        local inner = indent .. "  "
        local parts = {}
        local n = #v
        for i = 1, n do parts[#parts + 1] = inner .. lua_literal(v[i], inner) end
        local keys = {}
        for k in pairs(v) do
            if not (type(k) == "number" and k >= 1 and k <= n and k == floor(k)) then keys[#keys + 1] = k end
        end
        sort(keys, function(a, b) return tostring(a) < tostring(b) end)
        for _, k in ipairs(keys) do
            local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k or ("[" .. lua_literal(k) .. "]")
            parts[#parts + 1] = inner .. key .. " = " .. lua_literal(v[k], inner)
        end
        if #parts == 0 then return "{}" end
        return "{\n" .. concat(parts, ",\n") .. "\n" .. indent .. "}"
    end
    return "nil"
end
M.lua_literal = lua_literal

local function is_json_path(path) return path:lower():match("%.json$") ~= nil end

-- policy:save(path): JSON when path ends in .json (lua-cjson), else a Lua file "return {...}".
-- Written to a temporary file and renamed, so a reader never sees half a policy.
-- Returns true or nil, err.
function Policy:save(path)
    if type(path) ~= "string" then error("bad argument #1 to 'save' (string expected, got " .. type(path) .. ")", 2) end
    local data = self:to_table()
    local text
    if is_json_path(path) then
        local ok, cjson = pcall(require, "cjson")
        if not ok then return nil, "save: lua-cjson is not installed (save as .lua instead)" end
        text = cjson.encode(data) .. "\n"
    else
        text = "-- wisp placement policy (wisp.calibrate), " .. tostring(self.date or os.date("!%Y-%m-%dT%H:%M:%SZ")) .. "\nreturn "
               .. lua_literal(data) .. "\n"
    end
    local tmp = path .. ".tmp"
    local f, err = io.open(tmp, "wb")
    if not f then return nil, "save: " .. tostring(err) end
    f:write(text)
    f:close()
    local ok, rerr = os.rename(tmp, path)
    if not ok then os.remove(tmp); return nil, "save: " .. tostring(rerr) end
    return true
end

-- M.load(path) -> policy or nil, err. JSON (.json) or a Lua table literal (run with no
-- globals at all, so a policy file cannot do anything but return data).
function M.load(path)
    if type(path) ~= "string" then error("bad argument #1 to 'load' (string expected, got " .. type(path) .. ")", 2) end
    local f, err = io.open(path, "rb")
    if not f then return nil, "placement.load: " .. tostring(err) end
    local text = f:read("*a")
    f:close()
    local data
    if is_json_path(path) or text:match("^%s*{") then
        local ok, cjson = pcall(require, "cjson")
        if not ok then return nil, "placement.load: " .. path .. ": lua-cjson is not installed" end
        local dok, v = pcall(cjson.decode, text)
        if not dok then return nil, "placement.load: " .. path .. ": bad JSON: " .. tostring(v) end
        data = v
    else
        local chunk, lerr = loadstring(text, "=" .. path)
        if not chunk then return nil, "placement.load: " .. tostring(lerr) end
        setfenv(chunk, { math = { huge = huge } })
        local ok, v = pcall(chunk)
        if not ok then return nil, "placement.load: " .. path .. ": " .. tostring(v) end
        data = v
    end
    if type(data) ~= "table" then return nil, "placement.load: " .. path .. ": a policy table expected" end
    local ok, p = pcall(M.policy, data)
    if not ok then
        return nil, "placement.load: " .. path .. ": " .. tostring(p):gsub("^bad argument #1 to 'policy' %((.*)%)$", "%1")
    end
    return p
end

-- A readable table of the policy: measured points, the best device, the crossover.
function Policy:describe()
    local lines = {}
    local head = fmt("%10s", "rows")
    for _, d in ipairs(self.devices) do head = head .. fmt(" %12s", d .. " ms") end
    lines[1] = head .. "   best"
    for _, p in ipairs(self.points) do
        local l = fmt("%10d", p.rows)
        for _, d in ipairs(self.devices) do l = l .. fmt(" %12.4f", p.ms[d]) end
        lines[#lines + 1] = l .. "   " .. self:choose(p.rows)
    end
    if #self.crossover == 0 then
        lines[#lines + 1] = fmt("no crossover: %s is faster at every measured size", self.breaks[1].device)
    end
    for _, c in ipairs(self.crossover) do
        lines[#lines + 1] = fmt("crossover at %d rows: %s below, %s from there", c.rows, c.from, c.to)
    end
    return concat(lines, "\n")
end

---------------------------------------------------------------------------
-- calibration
---------------------------------------------------------------------------

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

-- Median time (ns) of one session:score call over rotating batches.
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

-- wisp.calibrate(model[, opts]) -> policy or nil, err.
-- Measures session:score on every usable device of the model's engine (the CPU and each
-- usable GPU) over a sweep of batch sizes, at the model's own row width, with prebuilt
-- batches rotated so every call sees fresh rows; median per-call times. opts:
--   sizes     batch sizes (default 1, 10, 100, 1k, 10k, 100k, 200k)
--   devices   devices to compare (default: cpu and each usable gpu:N)
--   features  features a row (default: see row_width)
--   repeats   timed passes per point (default 5; 3 with quick)
--   min_ms    each pass runs calls for at least this long (default 10; 3 with quick)
--   max_rows_built  rows of batches built per size (default 400k), at most 16 batches a size
--   batches   function(size) -> a list of batches of that size to time (yours: real rows),
--             or nil for random ones; the caller keeps ownership
--   quick     fewer, shorter passes
--   progress  function(size, device, ms) called after each point
function M.calibrate(model, opts)
    if getmetatable(model) ~= wisp.Model then
        error("bad argument #1 to 'calibrate' (model expected, got " .. type(model) .. ")", 2)
    end
    opts = opts or {}
    if type(opts) ~= "table" then error("bad argument #2 to 'calibrate' (table expected, got " .. type(opts) .. ")", 2) end
    local eng = model.engine
    eng:gpu_count()                                      -- the backend live: builder batches are pinned
    local devices = opts.devices
    if not devices then devices = M.usable_devices(eng) end
    for i, d in ipairs(devices) do
        if not is_device(d) then error(fmt("bad argument #2 to 'calibrate' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2) end
    end
    local sizes = opts.sizes or { 1, 10, 100, 1000, 10000, 100000, 200000 }
    local width = row_width(model, opts)
    local nf = model:num_features()
    local repeats = opts.repeats or (opts.quick and 3 or 5)
    local min_ns = (opts.min_ms or (opts.quick and 3 or 10)) * 1e6
    local budget = opts.max_rows_built or 400000
    local sess, err = model:session(devices[1])
    if not sess then return nil, "calibrate: " .. tostring(err) end
    local maxs = 0
    for _, s in ipairs(sizes) do maxs = max(maxs, s) end
    local out_keep = ffi.new("float[?]", maxs)
    local out = ffi.cast("float *", out_keep)           -- a pointer: session:score's JIT-friendly path
    local points = {}
    for si, size in ipairs(sizes) do
        local batches, own = opts.batches and opts.batches(size), false
        if not batches then
            local count = max(1, min(16, floor(budget / size)))
            batches, own = M.random_batches(eng, nf, size, width, count, 1000 + si), true
        end
        local ms = {}
        for _, d in ipairs(devices) do
            local ok, serr = sess:set_device(d)
            if not ok then sess:close(); return nil, "calibrate: " .. tostring(serr) end
            local t = time_calls(sess, batches, out, repeats, min_ns, 2)
            ms[d] = t / 1e6
            if opts.progress then opts.progress(size, d, ms[d]) end
        end
        if own then for _, b in ipairs(batches) do b:close() end end
        points[#points + 1] = { rows = size, ms = ms }
        collectgarbage()
    end
    sess:close()
    out_keep = nil
    local _, gpu_status = M.usable_devices(eng)
    return M.policy { devices = devices, points = points,
                      machine = { cpu_threads = eng:threads(), gpu_status = gpu_status },
                      model = { num_features = nf, features_per_row = width, dtype = model:dtype() },
                      date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                      options = { repeats = repeats, min_ms = min_ns / 1e6 } }
end

---------------------------------------------------------------------------
-- pipelines: a session whose device is chosen per batch
---------------------------------------------------------------------------

-- Normalize a placement: {score = stage, transform = stage}, each a device, a function or a policy.
local function check_stage(v, what, depth)
    if v == nil then return nil end
    if is_device(v) or type(v) == "function" then return v end
    if type(v) == "table" and type(v.choose) == "function" then return v end
    error(fmt("bad placement (%s: a device name (cpu, gpu, gpu:N, gpus, gpus:N, auto), a function of the batch or a policy expected, got %s)",
              what, type(v) == "string" and ("'" .. v .. "'") or type(v)), depth + 1)
end

local function normalize(p, depth)
    if p == nil then return { score = "auto", transform = "cpu" } end
    if type(p) == "string" or type(p) == "function" or (type(p) == "table" and type(p.choose) == "function") then
        return { score = check_stage(p, "score", depth + 1), transform = "cpu" }
    end
    if type(p) ~= "table" then
        error("bad placement (a device, a function, a policy or {score=, transform=} expected, got " .. type(p) .. ")", depth + 1)
    end
    for k in pairs(p) do
        if k ~= "score" and k ~= "transform" then
            error("bad placement (unknown stage '" .. tostring(k) .. "': the stages are score and transform)", depth + 1)
        end
    end
    return { score = check_stage(p.score, "score", depth + 1) or "auto",
             transform = check_stage(p.transform, "transform", depth + 1) or "cpu" }
end
M.normalize = normalize

local function resolve(stage, info)
    if type(stage) == "string" then return stage end
    if type(stage) == "function" then return stage(info) end
    return stage:choose(info)
end

-- wisp.pipeline{model = m | session = s, placement = ..., device = initial}
-- -> a pipeline: :score, :score_table, :submit, :wait like a session's, with the device
-- chosen per batch. queue_depth (pipe.queue_depth, set by a batcher) reaches functions.
function M.pipeline(opts)
    if type(opts) ~= "table" then error("bad argument #1 to 'pipeline' (table expected, got " .. type(opts) .. ")", 2) end
    local placement = normalize(opts.placement, 2)
    local sess = opts.session
    if sess == nil then
        if getmetatable(opts.model) ~= wisp.Model then error("bad argument #1 to 'pipeline' (model or session expected)", 2) end
        local first = is_device(placement.score) and placement.score or "cpu"
        local err
        sess, err = opts.model:session(opts.device or first)
        if not sess then return nil, "pipeline: " .. tostring(err) end
    elseif getmetatable(sess) ~= wisp.Session then
        error("bad argument #1 to 'pipeline' (session: a session expected)", 2)
    end
    return setmetatable({
        session = sess, model = sess.model, placement = placement,
        current = sess:device(), switches = 0, queue_depth = 0,
        _info = { rows = 0, nnz = 0, queue_depth = 0 },
        _last = { score = sess:device(), transform = "cpu" },
    }, Pipeline)
end

-- policy:apply(session) -> a pipeline over that session with this policy as the score placement.
function Policy:apply(session)
    return M.pipeline { session = session, placement = { score = self } }
end

-- Replace the placement; the next batch uses it.
function Pipeline:set_placement(p)
    self.placement = normalize(p, 2)
    return true
end

-- The message for a placement (stage "score" or "transform") that chose something else than a device.
local function not_a_device(stage, dev)
    return fmt("pipeline: the %s placement chose %s, not a device (cpu, gpu, gpu:N, gpus, gpus:N, auto)", stage,
               type(dev) == "string" and ("'" .. dev .. "'") or tostring(dev))
end

-- Move the pipeline's session to dev (a device) unless it is there; true, or nil, err.
local function switch_to(self, dev)
    if dev == self.current then return true end
    local ok, err = self.session:set_device(dev)
    if not ok then return nil, "pipeline: " .. tostring(err) end
    self.current = dev
    self.switches = self.switches + 1
    return true
end

-- Choose and apply the device for a batch; returns the device or nil, err.
function Pipeline:place(batch)
    local info = self._info
    local bh = batch._h
    info.rows = tonumber(C.wisp_batch_rows(bh))
    info.nnz = tonumber(C.wisp_batch_nnz(bh))
    info.queue_depth = self.queue_depth
    local dev = resolve(self.placement.score, info)
    if dev ~= self.current then
        if not is_device(dev) then return nil, not_a_device("score", dev) end
        local ok, err = switch_to(self, dev)
        if not ok then return nil, err end
    end
    local last = self._last
    last.score = dev
    if type(self.placement.transform) ~= "string" or self.placement.transform ~= "cpu" then
        local td = resolve(self.placement.transform, info)
        last.transform = td == "cpu" and "cpu" or (tostring(td) .. " (not run: the batch came transformed)")
    end
    return dev
end

-- Choose the devices for a raw batch: the score device (applied to the session) and
-- whether the transform runs fused with it on the GPU. Returns dev, fused or nil, err.
function Pipeline:place_raw(raw)
    local info = self._info
    info.rows = raw:rows()
    info.nnz = 0
    info.queue_depth = self.queue_depth
    info.raw = true
    local dev = resolve(self.placement.score, info)
    local td = resolve(self.placement.transform, info)
    info.raw = nil
    if not is_device(dev) then return nil, not_a_device("score", dev) end
    if not is_device(td) then return nil, not_a_device("transform", td) end
    local ok, err = switch_to(self, dev)
    if not ok then return nil, err end
    local last = self._last
    last.score = dev
    local fused = td ~= "cpu" and td == dev
    if fused then last.transform = td
    elseif td == "cpu" then last.transform = "cpu"
    else last.transform = "cpu (" .. tostring(td) .. " asked: the transform runs on a GPU only with the score on the same one)" end
    return dev, fused
end

local RawBatch = require("wisp.raw").RawBatch

local function check_raw(raw, fname)
    if getmetatable(raw) ~= RawBatch or raw._h == nil then
        error("bad argument #1 to '" .. fname .. "' (an open raw batch expected)", 3)
    end
end

-- pipe:score_raw(raw[, out]) -> out, rows; or nil, err: a raw batch to
-- probabilities, the transform and score stages placed for this batch.
function Pipeline:score_raw(raw, out)
    check_raw(raw, "score_raw")
    local dev, fused = self:place_raw(raw)
    if not dev then return nil, fused end
    if fused then
        local o, rows = self.session:score_raw(raw, out)
        if o then self._last.transform = self.session:last_device() end   -- "cpu" after a device failure
        return o, rows
    end
    local b = self._rawbatch
    if not b then
        local err
        b, err = wisp.batch(self.session.engine)
        if not b then return nil, err end
        self._rawbatch = b
    end
    b:clear()
    local tb, err = raw:transform(b)
    if not tb then return nil, err end
    return self.session:score(b, out)
end

-- pipe:transform(raw[, batch]) -> batch; or nil, err: the transform stage alone (on the
-- GPU when it is placed on the score stage's GPU: the ids come back into the batch).
function Pipeline:transform(raw, batch)
    check_raw(raw, "transform")
    local dev, fused = self:place_raw(raw)
    if not dev then return nil, fused end
    if fused then return self.session:transform(raw, batch) end
    return raw:transform(batch)
end

-- Check the batch argument of method fname, place the batch, and call the session's
-- method of that name: score, score_table and submit differ in nothing else.
local function placed_call(self, fname, batch, out)
    if getmetatable(batch) ~= wisp.Batch or batch._h == nil then
        error("bad argument #1 to '" .. fname .. "' (an open batch expected)", 2)   -- 2: the Pipeline methods tail-call this
    end
    local dev, err = self:place(batch)
    if not dev then return nil, err end
    local session = self.session
    return session[fname](session, batch, out)
end

function Pipeline:score(batch, out) return placed_call(self, "score", batch, out) end
function Pipeline:score_table(batch) return placed_call(self, "score_table", batch) end
function Pipeline:submit(batch, out) return placed_call(self, "submit", batch, out) end

function Pipeline:wait() return self.session:wait() end
function Pipeline:stats() return self.session:stats() end
function Pipeline:reset_stats() return self.session:reset_stats() end
function Pipeline:last_device() return self.session:last_device() end
function Pipeline:device() return self.current end
function Pipeline:last_placement() return { score = self._last.score, transform = self._last.transform } end
function Pipeline:close()
    if self._rawbatch then self._rawbatch:close(); self._rawbatch = nil end
    self.session:close()
end

-- A one-line description of a placement stage (describe_node: its old name, an alias).
function M.describe_stage(stage)
    if type(stage) == "string" then return stage end
    if type(stage) == "function" then return "a Lua function of the batch" end
    if getmetatable(stage) == Policy then
        local parts = {}
        for i, b in ipairs(stage.breaks) do
            if b.upto == huge then parts[i] = b.device .. (i > 1 and " above" or " always")
            else parts[i] = fmt("%s below %d rows", b.device, b.upto) end
        end
        return "calibrated: " .. concat(parts, ", ")
    end
    return "a policy object"
end
M.describe_node = M.describe_stage

wisp.placement = M
wisp.calibrate = M.calibrate
wisp.pipeline = M.pipeline
return M
