-- placement_live.lua — a pipeline's live re-check of its calibrated policy next to each break.
--
-- What batches cost on the two devices of each break as they run, and the break moved where that
-- disagrees with the policy beyond the spread.
--
--
-- A calibration is one moment's measurement. The crossover of a machine moves between runs
-- and within one (other load, clocks, caches), so a policy right at calibration time can be
-- slower than the other device, beyond the spread, at the sizes next to its break. The auto
-- device measures what batches cost past its crossover (engine/score/autoplace.c); a
-- pipeline does the same next to each break of its policy:
--
-- ZONES. For each break (device A below, B from there on) the zone is the bracket of
-- measured sizes it lies in, a .. b (the break is in a+1 .. b). A batch with a <= rows <= b
-- is the zone's. The zone's batches run in cycles: most on the device the breaks choose,
-- untimed; then `calls` timed on it; then one untimed and `calls` timed on the other device
-- of the pair (the first of them is not timed, as in calibrate's passes; a pipeline scores
-- them on a second session placed on that device, pipe.try_sessions, so that its own session
-- is never moved to try a device: moving a session off a GPU closes its GPU state). A
-- cycle is `every` batches (128) once both devices have `min_passes` passes (3), and
-- 2 * calls + 2 until then, so a new zone is judged soon. Each `calls` (4) timed batches of
-- one device make a pass: the sum of their times over the sum of what the calibration
-- predicts for them (time_at on the policy's points), the device's live ratio; the last
-- `window` (5) passes of each device are kept.
-- THE RE-CHECK, after each pass once both devices have min_passes: the zone's two points are
-- the calibrated ones with each device's median scaled by its median ratio, and its band the
-- wider of the calibrated band (scaled alike) and the ratios' quartiles; between them medians
-- and bands are linear in rows. Where the device the breaks choose is acceptable by the core's
-- rule (lo(chosen) <= hi(fastest): wisp_placement_acceptable) at both ends of the bracket and
-- on both sides of the break (rows upto - 1 and upto), nothing changes, so noise within the
-- spread moves nothing.
-- Where it is not, the two points take the live values and the breaks are derived again by
-- the rule from every point (wisp_placement_choose): the break moves, possibly out of the
-- bracket, and the bracket it lands in becomes the zone, checked the same way, so the break
-- walks to where the live costs put it. Every zone then starts afresh.
-- The policy itself never changes: the live breaks are the pipeline's (pipe:live()).
-- Timed are pipe:score and pipe:score_table (calls that return their answer); submit/wait
-- and raw batches are placed by the live breaks without teaching them; a GPU batch that fell
-- back to the CPU is not counted.
local P = require "wisp.placement_policy"

local R = P._rule
local time_at, band, acceptable, derive = R.time_at, R.band, R.acceptable, R.derive
local max, min = math.max, math.min
local fmt, remove = string.format, table.remove
local type, pairs, ipairs, error, setmetatable = type, pairs, ipairs, error, setmetatable
local tostring, select = tostring, select

local M = {}
local Live = {}; Live.__index = Live
M.Live = Live

M.defaults = { every = 128, calls = 4, window = 5, min_passes = 3 }

-- A copy of a point (its own ms and spread tables).
local function copy_point(p)
    local ms, spread = {}, nil
    for d, v in pairs(p.ms) do ms[d] = v end
    if p.spread then
        spread = {}
        for d, s in pairs(p.spread) do spread[d] = { lo = s.lo, hi = s.hi, min = s.min, max = s.max } end
    end
    return { rows = p.rows, ms = ms, spread = spread, passes = p.passes }
end

local function copy_breaks(breaks, crossover)
    local b, c = {}, {}
    for i, x in ipairs(breaks) do b[i] = { upto = x.upto, device = x.device } end
    for i, x in ipairs(crossover) do c[i] = { rows = x.rows, from = x.from, to = x.to } end
    return b, c
end

-- The options of a live re-check (level: error's, for the caller's line).
local function check_opts(o, level)
    local out = {}
    for k, v in pairs(M.defaults) do out[k] = v end
    if o == nil or o == true then return out end
    if type(o) ~= "table" then
        error("bad live option (false, true or a table of every, calls, window, min_passes, clock expected)", level + 1)
    end
    for k, v in pairs(o) do
        if k == "clock" then
            if type(v) ~= "function" then
                error("bad live option (clock: a function returning ns expected)", level + 1)
            end
            out.clock = v
        elseif M.defaults[k] == nil then
            error(fmt("bad live option (unknown '%s': every, calls, window, min_passes, clock)", tostring(k)),
                  level + 1)
        elseif type(v) ~= "number" or v < 1 or v ~= math.floor(v) then
            error(fmt("bad live option (%s: a whole number >= 1 expected)", k), level + 1)
        else
            out[k] = v
        end
    end
    if out.every < 2 * out.calls + 2 then
        error("bad live option (every: at least 2 * calls + 2 expected)", level + 1)
    end
    if out.min_passes > out.window then error("bad live option (min_passes: at most window expected)", level + 1) end
    return out
end
M.check_opts = check_opts

-- placement_live.new(policy[, opts]) -> the live state of one pipeline over a policy.
function M.new(policy, opts)
    local o = check_opts(opts, 2)
    local pts = {}
    for i, p in ipairs(policy.points) do pts[i] = copy_point(p) end
    local self = setmetatable({
        policy = policy, devices = policy.devices, orig = policy.points, points = pts,
        every = o.every, calls = o.calls, window = o.window, min_passes = o.min_passes,
        start = 2 * o.calls + 2, clock = o.clock or P.now_ns,
        moves = 0, history = {}, explored = 0, timed = 0, rechecks = 0,
    }, Live)
    self.breaks, self.crossover = copy_breaks(policy.breaks, policy.crossover)
    self:_zones()
    return self
end

-- The zones of the current breaks, each with empty windows.
function Live:_zones()
    for _, z in ipairs(self.zones or {}) do z.dead = true end
    local zones, pts = {}, self.points
    for k, c in ipairs(self.crossover) do     -- zone k: crossover k's bracket (one always holds it: a+1 <= rows <= b)
        for i = 1, #pts - 1 do
            if pts[i].rows < c.rows and c.rows <= pts[i + 1].rows then
                zones[k] = { lo = pts[i].rows, hi = pts[i + 1].rows, i = i, upto = c.rows, from = c.from,
                                      to = c.to, pos = 0,
                                      acc = { [c.from] = { ns = 0, pred = 0, n = 0 },
                                              [c.to] = { ns = 0, pred = 0, n = 0 } },
                                      win = { [c.from] = {}, [c.to] = {} } }
                break
            end
        end
    end
    self.zones = zones
end

-- The index of the break that holds for a batch of `rows` rows.
local function break_at(b, rows)
    for i = 1, #b do
        if rows < b[i].upto then return i end
    end
    return #b
end

-- The device the live breaks choose for a batch of `rows` rows.
function Live:device_at(rows)
    local b = self.breaks
    return b[break_at(b, rows)].device
end

-- live:choose(rows) -> device, zone, other: the device for this batch; the zone when the call
-- is to be timed (pass its time to live:observe(zone, device, rows, ns)), else nil; and true
-- when the device is the other one of the zone's pair, being tried (a pipeline runs those
-- batches on a second session, leaving its own where the breaks put it). No loop but the
-- breaks' (zone i is break i's: the batch is in the zone of the break above it or below it),
-- so the hot path stays one compiled trace.
function Live:choose(rows)
    local b = self.breaks
    local i = break_at(b, rows)
    local dev = b[i].device
    local zones = self.zones
    local z = zones[i]
    if not (z and rows >= z.lo) then
        z = i > 1 and zones[i - 1] or nil
        if not (z and rows <= z.hi) then return dev, nil end
    end
    local full = #z.win[z.from] >= self.min_passes and #z.win[z.to] >= self.min_passes
    local len = full and self.every or self.start
    local c = z.pos
    z.pos = c + 1 < len and c + 1 or 0
    local k = self.calls
    if c < len - 2 * k - 1 then return dev, nil end
    if c < len - k - 1 then return dev, z end
    self.explored = self.explored + 1
    local other = dev == z.from and z.to or z.from
    if c == len - k - 1 then return other, nil, true end
    return other, z, true
end

-- What one timed call of `dev` on a batch of `rows` rows took (ns), in zone z.
function Live:observe(z, dev, rows, ns)
    if z.dead then return end
    local a = z.acc[dev]
    if not a then return end
    local pred = time_at(self.orig, dev, rows)
    if not pred or pred <= 0 then return end
    self.timed = self.timed + 1
    a.ns, a.pred, a.n = a.ns + ns, a.pred + pred * 1e6, a.n + 1
    if a.n < self.calls then return end
    local w = z.win[dev]
    w[#w + 1] = a.ns / a.pred
    if #w > self.window then remove(w, 1) end
    a.ns, a.pred, a.n = 0, 0, 0
    self:_recheck(z)
end

-- The zone's points with the live ratios applied (see THE RE-CHECK above).
function Live:_live_points(z)
    local out = {}
    for j, i in ipairs { z.i, z.i + 1 } do
        local o = self.orig[i]
        local p = copy_point(self.points[i])
        p.spread = p.spread or {}
        for _, d in ipairs { z.from, z.to } do
            local med, s = P.summarize(z.win[d])
            local olo, ohi = band(o, d)
            p.ms[d] = o.ms[d] * med
            p.spread[d] = { lo = min(olo * med, o.ms[d] * s.lo), hi = max(ohi * med, o.ms[d] * s.hi) }
            p.spread[d].min, p.spread[d].max = p.spread[d].lo, p.spread[d].hi
        end
        out[j] = p
    end
    return out
end

-- The point at x rows between points a and b (a.rows <= x <= b.rows): medians and bands
-- linear in rows, as time_at predicts.
local function between(a, b, x, devices)
    local f = (x - a.rows) / (b.rows - a.rows)
    local p = { rows = x, ms = {}, spread = {} }
    for _, d in ipairs(devices) do
        local alo, ahi = band(a, d)
        local blo, bhi = band(b, d)
        p.ms[d] = a.ms[d] + f * (b.ms[d] - a.ms[d])
        p.spread[d] = { lo = min(p.ms[d], alo + f * (blo - alo)), hi = max(p.ms[d], ahi + f * (bhi - ahi)) }
    end
    return p
end

function Live:_recheck(z)
    if #z.win[z.from] < self.min_passes or #z.win[z.to] < self.min_passes then return end
    self.rechecks = self.rechecks + 1
    local lp = self:_live_points(z)
    -- the choice at both ends of the bracket and on both sides of the break, by the live costs
    local stay = true
    for _, x in ipairs { z.lo, z.upto - 1, z.upto, z.hi } do
        local p = between(lp[1], lp[2], x, self.devices)
        if not acceptable(p, self.devices, self:device_at(x)) then stay = false; break end
    end
    if stay then return end
    local before = {}
    for i, c in ipairs(self.crossover) do before[i] = c.rows end
    local ratio = {}
    for _, d in ipairs { z.from, z.to } do ratio[d] = (P.summarize(z.win[d])) end
    self.points[z.i], self.points[z.i + 1] = lp[1], lp[2]
    self.breaks, self.crossover = derive(self.points, self.devices)
    local after = {}
    for i, c in ipairs(self.crossover) do after[i] = c.rows end
    self.moves = self.moves + 1
    self.history[#self.history + 1] = { zone = { z.lo, z.hi }, from = z.from, to = z.to, ratio = ratio,
                                        before = before, after = after, timed = self.timed }
    self:_zones()
end

-- A snapshot of the live state (plain data): the live breaks and crossover, how often they
-- moved (history: the zone, each device's median live ratio there, the crossover rows before
-- and after), batches explored on the other device, calls timed, re-checks made, each zone's
-- passes so far, the points the live breaks are derived from (placement.policy{devices =,
-- points = state.points} has the live breaks) and the calibrated crossover.
function Live:state()
    local b, c = copy_breaks(self.breaks, self.crossover)
    local zones = {}
    for i, z in ipairs(self.zones) do
        local passes, ratio = {}, {}
        for _, d in ipairs { z.from, z.to } do
            passes[d] = #z.win[d]
            ratio[d] = #z.win[d] > 0 and (P.summarize(z.win[d])) or nil
        end
        zones[i] = { lo = z.lo, hi = z.hi, from = z.from, to = z.to, passes = passes, ratio = ratio }
    end
    local hist, pts = {}, {}
    for i, h in ipairs(self.history) do hist[i] = h end
    for i, p in ipairs(self.points) do pts[i] = copy_point(p) end
    return { breaks = b, crossover = c, moves = self.moves, history = hist, explored = self.explored,
             timed = self.timed, rechecks = self.rechecks, zones = zones, points = pts,
             calibrated = select(2, copy_breaks(self.policy.breaks, self.policy.crossover)) }
end

-- placement.live.describe(state) -> one line: a live state's crossover (live:state(), pipe:live())
-- against the calibrated one, its moves and what it explored and timed.
function M.describe(st)
    local function list(cs, none)
        local t = {}
        for i, c in ipairs(cs) do t[i] = fmt("%s -> %s at %d rows", c.from, c.to, c.rows) end
        return #t > 0 and table.concat(t, ", ") or none
    end
    return fmt("live: %s (calibrated: %s); %d move%s, %d batches explored, %d timed, %d re-checks",
               list(st.crossover, "no crossover: " .. st.breaks[1].device), list(st.calibrated, "none"), st.moves,
               st.moves == 1 and "" or "s", st.explored, st.timed, st.rechecks)
end

function Live:describe() return M.describe(self:state()) end

return M
