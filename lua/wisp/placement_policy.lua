-- placement_policy.lua — calibrated policies: measured points -> the device per batch size; check, save, load.
--
-- The device per size comes from the core's choice rule (wisp_placement_*: engine/score/autoplace.c).
--
-- A point is { rows = N, ms = {device = median ms a call}, spread = {device = {lo =, hi =,
-- min =, max =}}, passes = P }: the median, quartiles (lo, hi) and extremes of the P timed
-- passes of each device at N rows (calibrate). spread and passes are optional: a point
-- without them (a hand-written one, or a policy saved before version 2) has no spread
-- (lo = hi = ms).
--
-- THE CHOICE RULE is the core's, stated once at the top of engine/score/autoplace.c and in
-- wisp.h (wisp_placement_acceptable, wisp_placement_choose): at a measured size a device is
-- acceptable when its band reaches the fastest median's band (lo(D) <= hi(B)); the policy
-- gives every measured size an acceptable device with the fewest switches, then the least
-- total relative excess over the fastest median (ties: the device listed first); a break
-- sits where the two medians, linear between the measured sizes, cross (else at their
-- geometric middle), kept in a+1 .. b, so each measured size gets the device chosen for it.
-- Below the smallest measured size the first choice holds, above the largest the last.
-- This file hands the points to those calls and keeps what they answer.
-- policy:check() verifies every measured size against the rule; policy:check(points)
-- holds the policy to another measurement of the same devices (a fresh run).
local ffi = require "ffi"
local base = require "wisp.base"
local C = base.C

local floor, max, huge = math.floor, math.max, math.huge
local fmt, concat, sort = string.format, table.concat, table.sort
local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable, getmetatable, error, pcall = setmetatable, getmetatable, error, pcall

local M = {}
local Policy = {}; Policy.__index = Policy
M.Policy = Policy

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

-- Scratch arrays for one point's verdict (the C rule's inputs), grown as needed.
local cap, v_ms, v_lo, v_hi, v_ok = 0, nil, nil, nil, nil
local v_fast = ffi.new("int[1]")

-- The C rule at one point: the fastest device by median (ties: the first listed), its
-- median, and for each device whether it is acceptable (lo(d) <= hi(fastest)) in v_ok.
local function verdict(p, devices)
    local nd = #devices
    if nd > cap then
        cap = max(nd, 8)
        v_ms, v_lo, v_hi = ffi.new("double[?]", cap), ffi.new("double[?]", cap), ffi.new("double[?]", cap)
        v_ok = ffi.new("int[?]", cap)
    end
    for k = 1, nd do
        local d = devices[k]
        v_ms[k - 1] = p.ms[d]
        v_lo[k - 1], v_hi[k - 1] = band(p, d)
    end
    local n = C.wisp_placement_acceptable(nd, v_ms, v_lo, v_hi, v_fast, v_ok)
    if n < 0 then error(base.last_error(n, "placement"), 3) end
    local f = devices[v_fast[0] + 1]
    return f, p.ms[f], n
end

-- The fastest device at p by median (ties: the first listed) and its median.
local function fastest(p, devices)
    local f, t = verdict(p, devices)
    return f, t
end

-- The choice rule at one point: is device d acceptable at p (lo(d) <= hi(fastest))?
local function acceptable(p, devices, d)
    verdict(p, devices)
    for k = 1, #devices do
        if devices[k] == d then return v_ok[k - 1] ~= 0 end
    end
    return false
end

-- How many devices are acceptable at p (1: the point is decided).
local function n_acceptable(p, devices)
    local _, _, n = verdict(p, devices)
    return n
end

-- breaks: { {upto = R, device = D}, ... } meaning D for rows < R (the last upto = inf);
-- crossover: { {rows = R, from = D1, to = D2} } where the chosen device changes. The
-- devices and the breaks are the core's (wisp_placement_choose) over the sorted points.
local function derive(points, devices)
    sort(points, function(a, b) return a.rows < b.rows end)
    local n, nd = #points, #devices
    local rows = ffi.new("uint64_t[?]", n)
    local ms, lo, hi = ffi.new("double[?]", n * nd), ffi.new("double[?]", n * nd), ffi.new("double[?]", n * nd)
    local chosen, brk = ffi.new("int[?]", n), ffi.new("uint64_t[?]", n)
    for i, p in ipairs(points) do
        rows[i - 1] = p.rows
        for k, d in ipairs(devices) do
            local c = (i - 1) * nd + k - 1
            ms[c] = p.ms[d]
            lo[c], hi[c] = band(p, d)
        end
    end
    local rc = C.wisp_placement_choose(n, nd, rows, ms, lo, hi, chosen, brk)
    if rc ~= 0 then error(base.last_error(rc, "placement"), 3) end
    local breaks, crossover = {}, {}
    local cur = devices[chosen[0] + 1]
    for i = 1, n - 1 do
        local nxt = devices[chosen[i] + 1]
        if nxt ~= cur then
            local at = tonumber(brk[i - 1])
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
                    fail(fmt("points[%d]: spread of '%s': {lo = L, hi = H} with 0 <= L <= ms (%.17g) <= H expected",
                             i, d, v))
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
    if type(devices) ~= "table" or #devices == 0 then
        error("bad argument #1 to 'policy' (devices: a list of device names expected)", 2)
    end
    local dup = {}
    for i, d in ipairs(devices) do
        if not is_device(d) then
            error(fmt("bad argument #1 to 'policy' (devices[%d]: '%s' is not a device)", i, tostring(d)), 2)
        end
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
        local ok = acceptable(p, self.devices, c)           -- the core's rule: lo(chosen) <= hi(best)
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
            out[#out + 1] = fmt("%d rows: chose %s at %.4f ms [%.4f..%.4f], %s is faster at %.4f ms [%.4f..%.4f]: "
                                .. "slower by %.4f ms, the spread allows %.4f",
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
        text = "-- wisp placement policy (wisp.calibrate), " .. tostring(self.date or os.date("!%Y-%m-%dT%H:%M:%SZ"))
               .. "\nreturn "
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
        local why = tostring(p):gsub("^bad argument #1 to 'policy' %((.*)%)$", "%1")
        return nil, "placement.load: " .. path .. ": " .. why
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

-- M.summarize(passes) -> median, {lo = first quartile, hi = third quartile, min =, max =}:
-- one device's pass times at one size, as a point keeps them (the core's summary,
-- wisp_placement_summarize).
local sum_buf, sum_cap, sum_q = nil, 0, ffi.new("double[5]")
function M.summarize(list)
    local n = #list
    if n > sum_cap then sum_cap = max(n, 16); sum_buf = ffi.new("double[?]", sum_cap) end
    for i = 1, n do
        local v = tonumber(list[i])
        if not v then error(fmt("bad argument #1 to 'summarize' (passes[%d]: a number expected)", i), 2) end
        sum_buf[i - 1] = v
    end
    local rc = C.wisp_placement_summarize(sum_buf, n, sum_q)
    if rc ~= 0 then error("bad argument #1 to 'summarize' (" .. base.errmsg(rc) .. ")", 2) end
    return sum_q[2], { lo = sum_q[1], hi = sum_q[3], min = sum_q[0], max = sum_q[4] }
end

-- The rule's pieces for the other placement modules (calibrate's sweep, the live re-check).
M._rule = { time_at = time_at, best_at = best_at, band = band, fastest = fastest, acceptable = acceptable,
            n_acceptable = n_acceptable, derive = derive, copy_points = copy_points, new_policy = new_policy }

return M
