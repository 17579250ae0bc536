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
-- policies: measured points -> the device per batch size
---------------------------------------------------------------------------
--
-- A point is { rows = N, ms = {device = median ms a call}, spread = {device = {lo =, hi =,
-- min =, max =}}, passes = P }: the median, quartiles (lo, hi) and extremes of the P timed
-- passes of each device at N rows (calibrate). spread and passes are optional: a point
-- without them (a hand-written one, or a policy saved before version 2) has no spread
-- (lo = hi = ms).
--
-- THE CHOICE RULE. At a measured size, let B be the device of the smallest median.
-- A device D is acceptable there when its band reaches B's: lo(D) <= hi(B), i.e. D's
-- median is slower than B's by no more than the two devices' measured spread,
--     ms(D) - ms(B) <= (ms(D) - lo(D)) + (hi(B) - ms(B)).
-- Devices within each other's spread are equally good; otherwise only the faster one
-- is. (With no spread recorded only the fastest median is acceptable.)
-- The policy gives every measured size an acceptable device, choosing among the
-- sequences that do so (1) the one with the fewest switches, then (2) the least total
-- relative excess over the fastest median, sum of (ms(D) - ms(B)) / ms(B) over the sizes
-- (ties: the device listed first); so a device that is faster only within the noise at
-- one size does not make a pair of breaks, and a break sits where the medians cross.
-- Between two measured sizes a and b (a < b) choosing different devices A and B the break
-- is where A's and B's medians, linear in rows between a and b, cross; where they do not
-- cross inside (the choice was within the spread) at the geometric middle; rounded and
-- kept in a+1 .. b, so the measured sizes get exactly the devices chosen. Below the
-- smallest measured size the first choice holds, above the largest the last.
-- policy:check() verifies every measured size against the rule; policy:check(points)
-- holds the policy to another measurement of the same devices (a fresh run).

-- Time (ms) of device d at r rows: linear in rows between measured sizes (a batch costs
-- a fixed part plus a per-row part), the smallest size's time below it, the last
-- segment's line extended above the largest (predict only: the breaks do not extrapolate).
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

-- The band (lo, hi ms) of device d at point p: its quartiles, or its median twice.
local function band(p, d)
    local s = p.spread and p.spread[d]
    if s then return s.lo, s.hi end
    local t = p.ms[d]
    return t, t
end

-- The fastest device at p by median (ties: the first listed) and its median.
local function fastest(p, devices)
    local bd, bt = nil, huge
    for _, d in ipairs(devices) do
        local t = p.ms[d]
        if t < bt then bd, bt = d, t end
    end
    return bd, bt
end

-- The choice rule at one point: is device d acceptable at p (lo(d) <= hi(fastest))?
local function acceptable(p, devices, d)
    local b = fastest(p, devices)
    local _, bhi = band(p, b)
    local dlo = band(p, d)
    return dlo <= bhi
end

-- How many devices are acceptable at p (1: the point is decided).
local function n_acceptable(p, devices)
    local n = 0
    for _, d in ipairs(devices) do if acceptable(p, devices, d) then n = n + 1 end end
    return n
end

-- The device for each point (sorted by rows) under the choice rule: fewest switches,
-- then the least total relative excess, by dynamic programming over (point, device).
local function assign(points, devices)
    local n, nd = #points, #devices
    local sw, ex, back = {}, {}, {}
    for i = 1, n do
        local p = points[i]
        local _, bt = fastest(p, devices)
        sw[i], ex[i], back[i] = {}, {}, {}
        for k = 1, nd do
            local d = devices[k]
            if acceptable(p, devices, d) then
                local cost = (p.ms[d] - bt) / max(bt, 1e-12)
                if i == 1 then
                    sw[i][k], ex[i][k] = 0, cost
                else
                    local bs, be, bj = huge, huge, nil
                    for j = 1, nd do
                        if sw[i - 1][j] then
                            local s = sw[i - 1][j] + (j == k and 0 or 1)
                            local e = ex[i - 1][j] + cost
                            if s < bs or (s == bs and e < be) then bs, be, bj = s, e, j end
                        end
                    end
                    sw[i][k], ex[i][k], back[i][k] = bs, be, bj
                end
            end
        end
    end
    local bs, be, bk = huge, huge, nil
    for k = 1, nd do
        if sw[n][k] and (sw[n][k] < bs or (sw[n][k] == bs and ex[n][k] < be)) then bs, be, bk = sw[n][k], ex[n][k], k end
    end
    local chosen = {}
    for i = n, 1, -1 do
        chosen[i] = devices[bk]
        bk = back[i][bk]
    end
    return chosen
end

-- breaks: { {upto = R, device = D}, ... } meaning D for rows < R (the last upto = inf);
-- crossover: { {rows = R, from = D1, to = D2} } where the chosen device changes.
local function derive(points, devices)
    sort(points, function(a, b) return a.rows < b.rows end)
    local chosen = assign(points, devices)
    local breaks, crossover = {}, {}
    local cur = chosen[1]
    for i = 1, #points - 1 do
        local nxt = chosen[i + 1]
        if nxt ~= cur then
            local a, b = points[i], points[i + 1]
            local d0 = a.ms[cur] - a.ms[nxt]
            local d1 = b.ms[cur] - b.ms[nxt]
            local x
            if d0 < 0 and d1 > 0 then x = a.rows + (b.rows - a.rows) * d0 / (d0 - d1)
            else x = math.sqrt(a.rows * b.rows) end
            local at = min(b.rows, max(a.rows + 1, floor(x + 0.5)))
            breaks[#breaks + 1] = { upto = at, device = cur }
            crossover[#crossover + 1] = { rows = at, from = cur, to = nxt }
            cur = nxt
        end
    end
    breaks[#breaks + 1] = { upto = huge, device = cur }
    return breaks, crossover
end

local function new_policy(t)
    local p = setmetatable(t, Policy)
    p.breaks, p.crossover = derive(p.points, p.devices)
    return p
end

-- Checked copies of points (for policy{} and check); errors say "points[i]: ..." (level: error's).
local function copy_points(points, devices, what, level)
    local fail = function(s) error(fmt("bad argument #1 to '%s' (%s)", what, s), level + 2) end
    if type(points) ~= "table" or #points == 0 then fail("points: a non-empty list expected") end
    local copy, seen = {}, {}
    for i, p in ipairs(points) do
        if type(p) ~= "table" or type(p.rows) ~= "number" or p.rows < 1 or p.rows ~= floor(p.rows) or p.rows == huge
            or type(p.ms) ~= "table" then
            fail(fmt("points[%d]: {rows = N >= 1 (a whole number), ms = {device = milliseconds}} expected", i))
        end
        if seen[p.rows] then fail(fmt("points[%d]: %d rows measured twice (points[%d])", i, p.rows, seen[p.rows])) end
        seen[p.rows] = i
        if p.spread ~= nil and type(p.spread) ~= "table" then
            fail(fmt("points[%d]: spread: {device = {lo =, hi =, min =, max =}} expected", i))
        end
        local ms, spread = {}, nil
        for _, d in ipairs(devices) do
            local v = tonumber(p.ms[d])
            if not v or v < 0 or v ~= v or v == huge then
                fail(fmt("points[%d]: no time for device '%s'", i, d))
            end
            ms[d] = v
            local s = p.spread and p.spread[d]
            if s ~= nil then
                local lo, hi = type(s) == "table" and tonumber(s.lo), type(s) == "table" and tonumber(s.hi)
                if not lo or not hi or lo ~= lo or hi ~= hi or lo < 0 or lo > v or hi < v or hi == huge then
                    fail(fmt("points[%d]: spread of '%s': {lo = L, hi = H} with 0 <= L <= ms (%.17g) <= H expected", i, d, v))
                end
                local mn, mx = tonumber(s.min) or lo, tonumber(s.max) or hi
                if mn > lo or mx < hi then
                    fail(fmt("points[%d]: spread of '%s': min <= lo and hi <= max expected", i, d))
                end
                spread = spread or {}
                spread[d] = { lo = lo, hi = hi, min = mn, max = mx }
            end
        end
        local passes = p.passes
        if passes ~= nil and (type(passes) ~= "number" or passes < 1 or passes ~= floor(passes)) then
            fail(fmt("points[%d]: passes: a whole number >= 1 expected", i))
        end
        copy[i] = { rows = p.rows, ms = ms, spread = spread, passes = passes }
    end
    sort(copy, function(a, b) return a.rows < b.rows end)
    return copy
end

-- M.policy{devices = {"cpu", "gpu:0"}, points = { {rows = 10, ms = {cpu = 0.01, ["gpu:0"] = 0.02},
--          spread = {cpu = {lo = 0.009, hi = 0.012}, ...}}, ... }}
-- A policy from measured (or hand-written) points; every point needs a time for every
-- device, spread is optional (see the choice rule above). Versions 1 (no spread) and 2 load.
function M.policy(t)
    if type(t) ~= "table" then error("bad argument #1 to 'policy' (table expected, got " .. type(t) .. ")", 2) end
    local devices = t.devices
    if type(devices) ~= "table" or #devices == 0 then error("bad argument #1 to 'policy' (devices: a list of device names expected)", 2) end
    local dup = {}
    for i, d in ipairs(devices) do
        if not is_device(d) then error(fmt("bad argument #1 to 'policy' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2) end
        if dup[d] then error(fmt("bad argument #1 to 'policy' (devices[%d]: '%s' twice)", i, d), 2) end
        dup[d] = true
    end
    if t.version ~= nil and t.version ~= 1 and t.version ~= 2 then
        error(fmt("bad argument #1 to 'policy' (version %s: versions 1 and 2 are known)", tostring(t.version)), 2)
    end
    local copy = copy_points(t.points, devices, "policy", 2)
    local dev = {}
    for i, d in ipairs(devices) do dev[i] = d end
    return new_policy { kind = "calibrated", version = 2, devices = dev, points = copy,
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

-- policy:check([points]) -> rows, all_ok: the choice rule at every measured size (the
-- policy's own points, or `points`, another measurement of the same devices in the same
-- format). rows[i] = { rows =, chosen =, chosen_ms =, chosen_lo =, chosen_hi =, best =,
-- best_ms =, best_lo =, best_hi =, slower_ms = chosen_ms - best_ms, allowed_ms = (chosen_ms
-- - chosen_lo) + (best_hi - best_ms): the measured spread, ok = slower_ms <= allowed_ms
-- (lo(chosen) <= hi(best)), ratio = chosen_ms / best_ms }.
function Policy:check(points)
    local pts = points and copy_points(points, self.devices, "check", 2) or self.points
    local rows, all = {}, true
    for i, p in ipairs(pts) do
        local c = self:choose(p.rows)
        local b, bt = fastest(p, self.devices)
        local clo, chi = band(p, c)
        local blo, bhi = band(p, b)
        local ct = p.ms[c]
        local ok = clo <= bhi
        all = all and ok
        rows[i] = { rows = p.rows, chosen = c, chosen_ms = ct, chosen_lo = clo, chosen_hi = chi,
                    best = b, best_ms = bt, best_lo = blo, best_hi = bhi,
                    slower_ms = ct - bt, allowed_ms = (ct - clo) + (bhi - bt), ok = ok,
                    ratio = bt > 0 and ct / bt or 1, passes = p.passes }
    end
    return rows, all
end

-- The lines of a check's rows where it was not ok (an empty list: none).
function M.check_failures(rows)
    local out = {}
    for _, r in ipairs(rows) do
        if not r.ok then
            out[#out + 1] = fmt("%d rows: chose %s at %.4f ms [%.4f..%.4f], %s is faster at %.4f ms [%.4f..%.4f]: slower by %.4f ms, the spread allows %.4f",
                                r.rows, r.chosen, r.chosen_ms, r.chosen_lo, r.chosen_hi, r.best, r.best_ms, r.best_lo,
                                r.best_hi, r.slower_ms, r.allowed_ms)
        end
    end
    return out
end

-- The plain data of the policy (what save writes).
function Policy:to_table()
    local pts = {}
    for i, p in ipairs(self.points) do
        local ms = {}
        for k, v in pairs(p.ms) do ms[k] = v end
        local spread
        if p.spread then
            spread = {}
            for k, s in pairs(p.spread) do spread[k] = { lo = s.lo, hi = s.hi, min = s.min, max = s.max } end
        end
        pts[i] = { rows = p.rows, ms = ms, spread = spread, passes = p.passes }
    end
    local cross = {}
    for i, c in ipairs(self.crossover) do cross[i] = { rows = c.rows, from = c.from, to = c.to } end
    local dev = {}
    for i, d in ipairs(self.devices) do dev[i] = d end
    return { kind = "calibrated", version = 2, devices = dev, points = pts, crossover = cross,
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

-- A readable table of the policy: measured points (median [quartiles] of each device),
-- the chosen device, the crossover.
function Policy:describe()
    local lines = {}
    local head = fmt("%10s", "rows")
    for _, d in ipairs(self.devices) do head = head .. fmt(" %28s", d .. " ms [lo..hi]") end
    lines[1] = head .. "   chosen"
    for _, p in ipairs(self.points) do
        local l = fmt("%10d", p.rows)
        for _, d in ipairs(self.devices) do
            local lo, hi = band(p, d)
            l = l .. fmt(" %10.4f [%7.4f..%7.4f]", p.ms[d], lo, hi)
        end
        lines[#lines + 1] = l .. "   " .. self:choose(p.rows)
    end
    if #self.crossover == 0 then
        lines[#lines + 1] = fmt("no crossover: %s at every measured size", self.breaks[1].device)
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

-- The q-quantile of a sorted list, linear between order statistics.
local function quantile(s, q)
    local n = #s
    if n == 0 then return nil end
    local h = (n - 1) * q + 1
    local i = floor(h)
    if i >= n then return s[n] end
    return s[i] + (h - i) * (s[i + 1] - s[i])
end

-- M.summarize(passes) -> median, {lo = first quartile, hi = third quartile, min =, max =}:
-- one device's pass times at one size, as a point keeps them.
function M.summarize(list)
    local s = {}
    for i = 1, #list do s[i] = list[i] end
    sort(s)
    return quantile(s, 0.5), { lo = quantile(s, 0.25), hi = quantile(s, 0.75), min = s[1], max = s[#s] }
end

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
                        error(fmt("calibrate: measure(%d, %d) gave a bad time for '%s': %s", size, want, d, tostring(v)), 0)
                    end
                    passes[d][#passes[d] + 1] = v
                end
            end
            local ms, spread = {}, {}
            for _, d in ipairs(devices) do ms[d], spread[d] = M.summarize(passes[d]) end
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
    if type(opts) ~= "table" then error("bad argument #2 to 'calibrate' (table expected, got " .. type(opts) .. ")", 2) end
    local eng = model.engine
    eng:gpu_count()                                      -- the backend live: builder batches are pinned
    local devices = opts.devices
    if not devices then devices = M.usable_devices(eng) end
    local dup = {}
    for i, d in ipairs(devices) do
        if not is_device(d) then error(fmt("bad argument #2 to 'calibrate' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2) end
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
    return M.policy { devices = devices, points = points,
                      machine = { cpu_threads = eng:threads(), gpu_status = gpu_status },
                      model = { num_features = nf, features_per_row = width, dtype = model:dtype() },
                      date = os.date("!%Y-%m-%dT%H:%M:%SZ"),
                      options = { repeats = repeats, max_repeats = max_repeats, min_ms = min_ns / 1e6,
                                  interleaved = true, sizes = sizes, refined = refined,
                                  refine_ratio = opts.refine ~= false and ratio or nil } }
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
