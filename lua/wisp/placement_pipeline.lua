-- placement_pipeline.lua — wisp.pipeline: a session whose device is chosen per batch by its placement.
--
-- The placement is a device, a function of the batch or a policy; a calibrated policy is
-- re-checked live next to its breaks (placement_live.lua).
local wisp = require "wisp"
local base = require "wisp.base"
local P = require "wisp.placement_policy"
local L = require "wisp.placement_live"
local C = base.C

local huge = math.huge
local fmt, concat = string.format, table.concat
local type, pairs, ipairs, tostring, tonumber = type, pairs, ipairs, tostring, tonumber
local setmetatable, getmetatable, error = setmetatable, getmetatable, error

local Policy = P.Policy
local is_device = P.is_device

local M = {}
local Pipeline = {}; Pipeline.__index = Pipeline
M.Pipeline = Pipeline

-- Normalize a placement: {score = stage, transform = stage}, each a device, a function or a policy.
local function check_stage(v, what, depth)
    if v == nil then return nil end
    if is_device(v) or type(v) == "function" then return v end
    if type(v) == "table" and type(v.choose) == "function" then return v end
    local got = type(v) == "string" and ("'" .. v .. "'") or type(v)
    error(fmt("bad placement (%s: a device name (cpu, gpu, gpu:N, gpus, gpus:N, auto), a function of the batch "
              .. "or a policy expected, got %s)", what, got), depth + 1)
end

local function normalize(p, depth)
    if p == nil then return { score = "auto", transform = "cpu" } end
    if type(p) == "string" or type(p) == "function" or (type(p) == "table" and type(p.choose) == "function") then
        return { score = check_stage(p, "score", depth + 1), transform = "cpu" }
    end
    if type(p) ~= "table" then
        error("bad placement (a device, a function, a policy or {score=, transform=} expected, got " .. type(p) .. ")",
              depth + 1)
    end
    for k in pairs(p) do
        if k ~= "score" and k ~= "transform" then
            error("bad placement (unknown stage '" .. tostring(k) .. "': the stages are score and transform)",
                  depth + 1)
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

-- The live re-check of a score stage that is a calibrated policy (nil: none; live = false: off).
local function live_for(stage, live)
    if live == false or getmetatable(stage) ~= Policy then return nil end
    return L.new(stage, live)
end

-- wisp.pipeline{model = m | session = s, placement = ..., device = initial, live = ...}
-- -> a pipeline: :score, :score_table, :submit, :wait like a session's, with the device
-- chosen per batch. queue_depth (pipe.queue_depth, set by a batcher) reaches functions.
-- A calibrated policy as the score placement is re-checked live next to its breaks
-- (placement_live.lua; pipe:live() says where the breaks are): live = false keeps the
-- policy's breaks as calibrated; a table sets every, calls, window, min_passes (see there)
-- and clock (a function returning ns, for simulations and specs). The batches that try the
-- other device of a break run on pipe.try_sessions[device], a session of the same model
-- opened on first use (kept open, closed with the pipeline); the pipeline's own session moves
-- only when the live breaks do.
function M.pipeline(opts)
    if type(opts) ~= "table" then
        error("bad argument #1 to 'pipeline' (table expected, got " .. type(opts) .. ")", 2)
    end
    local placement = normalize(opts.placement, 2)
    if opts.live ~= nil and opts.live ~= false then L.check_opts(opts.live, 2) end
    local sess = opts.session
    if sess == nil then
        if getmetatable(opts.model) ~= wisp.Model then
            error("bad argument #1 to 'pipeline' (model or session expected)", 2)
        end
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
        _live_opts = opts.live, _live = live_for(placement.score, opts.live), _zone = nil,
        try_sessions = {},
    }, Pipeline)
end

-- policy:apply(session[, live]) -> a pipeline over that session with this policy as the
-- score placement (live: as wisp.pipeline's).
function Policy:apply(session, live)
    return M.pipeline { session = session, placement = { score = self }, live = live }
end

-- Replace the placement; the next batch uses it (a policy starts its live re-check afresh).
function Pipeline:set_placement(p)
    self.placement = normalize(p, 2)
    self._live, self._zone = live_for(self.placement.score, self._live_opts), nil
    return true
end

-- The live re-check's state (placement_live.lua: live:state()), nil when the score
-- placement is not a calibrated policy or live is off.
function Pipeline:live()
    return self._live and self._live:state() or nil
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

-- Choose and apply the device for a batch; returns the device or nil, err. learn: a call
-- that returns its answer (score, score_table), which the live re-check may time or send to
-- the other device of a break (then the second result is true: the batch goes to
-- try_sessions[device], the pipeline's session stays).
function Pipeline:place(batch, learn)
    local info = self._info
    local bh = batch._h
    info.rows = tonumber(C.wisp_batch_rows(bh))
    info.nnz = tonumber(C.wisp_batch_nnz(bh))
    info.queue_depth = self.queue_depth
    local live, dev, try = self._live, nil, nil
    self._zone = nil
    if live then
        if learn then dev, self._zone, try = live:choose(info.rows) else dev = live:device_at(info.rows) end
    else
        dev = resolve(self.placement.score, info)
    end
    if dev ~= self.current and not try then
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
    return dev, try
end

-- Choose the devices for a raw batch: the score device (applied to the session) and
-- whether the transform runs fused with it on the GPU. Returns dev, fused or nil, err.
function Pipeline:place_raw(raw)
    local info = self._info
    info.rows = raw:rows()
    info.nnz = 0
    info.queue_depth = self.queue_depth
    info.raw = true
    local dev = self._live and self._live:device_at(info.rows) or resolve(self.placement.score, info)
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
    else
        last.transform = "cpu (" .. tostring(td)
                         .. " asked: the transform runs on a GPU only with the score on the same one)"
    end
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
        -- level 2: the Pipeline methods tail-call this
        error("bad argument #1 to '" .. fname .. "' (an open batch expected)", 2)
    end
    local dev, try = self:place(batch, fname ~= "submit")
    if not dev then return nil, try end
    local session, z = self.session, self._zone
    self._zone = nil
    if try then
        -- the other device of a break, tried on its own session (opened once); where it cannot
        -- be opened, the pipeline's session scores the batch and nothing is timed
        local ts = self.try_sessions[dev]
        if ts == nil then
            ts = self.model and self.model:session(dev) or false
            self.try_sessions[dev] = ts
        end
        if ts then session = ts else z, self._last.score = nil, self.current end
    end
    if z == nil then return session[fname](session, batch, out) end
    -- a call the live re-check times (placement_live.lua); not one a GPU failure sent to the CPU
    local live = self._live
    local rows, clock = self._info.rows, live.clock
    local t0 = clock()
    local r1, r2 = session[fname](session, batch, out)
    local ns = clock() - t0
    if r1 and not (dev:match("^gpu") and session:last_device() == "cpu") then live:observe(z, dev, rows, ns) end
    return r1, r2
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
    for d, s in pairs(self.try_sessions) do
        if s then s:close() end
        self.try_sessions[d] = nil
    end
    self.session:close()
end

-- A one-line description of a placement stage (describe_node: an alias kept through 0.1.x).
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

return M
