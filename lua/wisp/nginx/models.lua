-- wisp/nginx/models.lua — model entries and hot reload: an entry is one loaded version of one
-- model file (model, description, raw batch, session, batcher, warm-up); a slot's reload
-- loads a changed file into a new entry and swaps it in, refusing files changed in place.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local F = require "wisp.nginx.file"
local MT = require "wisp.nginx.metrics"

local type, tostring, pairs, ipairs, pcall, error, assert, setmetatable =
      type, tostring, pairs, ipairs, pcall, error, assert, setmetatable
local fmt = string.format
local file_stamp, header_checksum, pin_file = F.file_stamp, F.header_checksum, F.pin_file
local inc, lbl, observe, last_stages, set_gauges = MT.inc, MT.lbl, MT.observe, MT.last_stages, MT.set_gauges
local STAGES, STAGE_LABEL = MT.STAGES, MT.STAGE_LABEL
local log = S.log

local M = {}

local Entry = {}; Entry.__index = Entry

local function float_buf(n) return ffi.new("float[?]", n) end

-- Load path into a new entry: model, columns transformer (when the model has
-- columns), a session on `device`, a warm-up score. Returns entry or nil, err.
local function open_entry(name, path, device, opts)
    local stamp, fileinfo = file_stamp(path)
    if not stamp then return nil, path .. ": cannot stat (missing file?)" end
    local checksum = header_checksum(path)
    local model, err = S.wisp.load(path, { engine = S.engine })
    if not model then return nil, err end
    -- the identity recorded is the one of the bytes loaded: the same before and after
    -- the load, or the load is refused (a file written while it was read)
    if file_stamp(path) ~= stamp or header_checksum(path) ~= checksum then
        model:close()
        return nil, path .. ": the file changed while it was being loaded (replace a model by rename)"
    end
    local e = setmetatable({ name = name, path = path, device_asked = device, model = model, stamp = stamp,
                             file = fileinfo, checksum = checksum, inflight = 0,
                             retired = false, pending = nil }, Entry)
    e.pin = fileinfo.inode and pin_file(path, fileinfo.inode) or nil
    e.info = model:info()
    e.version = e.checksum and e.checksum:sub(1, 12) or stamp
    local ok, cerr = pcall(function()
        if e.info.columns then
            local fc = require "wisp.columns"
            local spec, serr = fc.from_model(model)
            if not spec then error(serr, 0) end
            e.spec = spec
            e.inputs = spec:input_list()
            e.slices = spec:slices()
            e.tr = assert(spec:raw_batch(S.engine))
        end
        e.session = assert(model:session(device))
        e.session:set_profiling(true)
        e.batch = assert(S.engine:batch())
        e.outcap = 1024
        e.out = float_buf(e.outcap)
        -- warm-up: one empty row scored on the device proves the device usable
        assert(e.batch:add({}))
        local out = assert(e.session:score(e.batch, e.out))
        if out[0] ~= out[0] then error("warm-up row scored NaN", 0) end
        e.batch:clear()
        e.device = e.session:last_device()
    end)
    if not ok then
        e:close()
        return nil, fmt("%s: %s", path, tostring(cerr))
    end
    return e
end

function Entry:close()
    for _, k in ipairs { "batcher", "bsession", "session", "tr", "batch", "model" } do
        local o = self[k]
        if o and o.close then pcall(o.close, o) end
        self[k] = nil
    end
    if self.pool then for _, b in ipairs(self.pool) do pcall(b.close, b) end; self.pool = nil end
    if self.pin then F.unpin(self.pin); self.pin = nil end
    self.closed = true
end

function Entry:release()
    self.inflight = self.inflight - 1
    if self.retired and self.inflight <= 0 and not self.closed then self:close() end
end

-- The batcher's runtime: batcher.ngx_runtime() with sleeps and timed waits of at least 1 ms. ngx.sleep has
-- millisecond resolution: a wait under 1 ms becomes ngx.sleep(0), which in Debian's nginx
-- (no OpenResty "delayed events" patch) logs a warning per call, and the batcher's wait
-- for its deadline would spin through such zero sleeps. So a batch leaves after
-- max(max_delay_us, 1 ms) unless it fills (max_rows) first.
local function ms_runtime(batcher)
    local rt = batcher.ngx_runtime()
    local ceil, max = math.ceil, math.max
    local sleep = ngx.sleep
    rt.name = "ngx (1 ms sleeps)"
    rt.sleep_us = function(us) sleep(max(1, ceil(us / 1000)) / 1000) end
    local wait = rt.wait
    -- wait(tk, 0) means "one tick" (ngx.sleep(0) in batcher.ngx_runtime): 1 ms here
    rt.wait = function(tk, timeout_us)
        if timeout_us ~= nil and timeout_us < 1000 then timeout_us = 1000 end
        return wait(tk, timeout_us)
    end
    return rt
end

local function attach_batcher(e)
    local cfg = S.cfg
    local want = cfg.batching
    if want == "auto" then want = e.device ~= nil and e.device:match("^gpu") ~= nil end
    if not want then return true end
    local batcher = require "wisp.batcher"
    local s, err = e.model:session(e.device_asked)
    if not s then return nil, err end
    s:set_profiling(true)
    e.bsession = s
    local name = e.name
    -- the batcher's target: the session, with every batch observed for the metrics
    local target = { model = e.model }
    function target.score(_, b, out)
        local r, rows = s:score(b, out)
        if r then
            observe("wisp_batch_rows", lbl(name, 'path="batcher"'), rows)
            local st = last_stages(s)
            for _, stg in ipairs(STAGES) do
                observe("wisp_stage_seconds", lbl(name, STAGE_LABEL[stg]), st[stg] / 1e9)
            end
        end
        return r, rows
    end
    local b, berr = batcher.new { session = target, runtime = ms_runtime(batcher), max_rows = cfg.batch_max_rows,
                                  max_delay_us = cfg.batch_max_delay_us, max_queue = cfg.batch_queue }
    if not b then return nil, berr end
    e.batcher = b
    return true
end

-- (Re)load one model slot. force (a :reload request): try even a file that failed before.
-- -> true[, "unchanged"] or nil, err. Debounced: a file whose stat identity (inode,
-- size, mtime) and header checksum are the serving version's is not mapped again
-- ("unchanged"); a file changed in place (the serving version's inode, with another
-- size, mtime or checksum: cp over it, truncate, a few bytes rewritten) is refused
-- without being read, since the serving copy is what was verified and a file being
-- written in place may be half-written; the refusal is logged once per state of the
-- file and reported in /v1/models/NAME ("file") and /readyz.
local function reload_slot(slot, force, why)
    local stamp, info = file_stamp(slot.path)
    if stamp == nil and not force then
        if not slot.missing_logged then
            log(ngx.ERR, "model '", slot.name, "': ", slot.path, " is missing; keeping the loaded version")
            slot.missing_logged = true
        end
        slot.file_state = slot.cur and { state = "missing; the loaded version keeps serving", serving = slot.cur.version } or nil
        return true
    end
    slot.missing_logged = nil
    local cur = slot.cur
    if cur and stamp ~= nil then
        if stamp == cur.stamp and header_checksum(slot.path) == cur.checksum then
            slot.file_state = nil
            return true, "unchanged"
        end
        if info.inode and cur.file.inode == info.inode and cur.file.dev == info.dev then
            local reason
            if cur.model and cur.model.file_changed then
                local okc, changed, what = pcall(cur.model.file_changed, cur.model)
                if okc and changed then reason = what end
            end
            reason = reason or fmt("%s (inode %d) was changed in place: size %d -> %d", slot.path, info.inode,
                                   cur.file.size, info.size)
            local err = "changed in place, refused: " .. reason .. "; replace a model file by rename (mv) in its directory"
            if slot.inplace_stamp ~= stamp then
                slot.inplace_stamp = stamp
                slot.failures = (slot.failures or 0) + 1
                inc("wisp_model_reloads_total", lbl(slot.name, 'result="refused"'))
                log(ngx.ERR, "model '", slot.name, "': ", err, "; version ", cur.version, " keeps serving")
            end
            slot.reload_error = { error = err, at = ngx.now(), file_stamp = stamp }
            slot.file_state = { state = err, serving = cur.version }
            return nil, err
        end
    end
    slot.inplace_stamp = nil
    if not force and stamp ~= nil and slot.failed_stamp == stamp then return true end   -- reported already
    local t0 = S.clock()
    local e, err = open_entry(slot.name, slot.path, slot.device, S.cfg)
    if e then
        local ok, berr = attach_batcher(e)
        if not ok then e:close(); e, err = nil, "batcher: " .. tostring(berr) end
    end
    if not e then
        slot.failed_stamp = stamp
        slot.reload_error = { error = tostring(err), at = ngx.now(), file_stamp = stamp }
        slot.file_state = slot.cur and { state = "failed to load, refused: " .. tostring(err), serving = slot.cur.version } or nil
        slot.failures = (slot.failures or 0) + 1
        inc("wisp_model_reloads_total", lbl(slot.name, 'result="failed"'))
        log(ngx.ERR, "model '", slot.name, "': ", slot.cur and "reload failed, the loaded version keeps serving: "
            or "load failed: ", err)
        set_gauges(slot)
        return nil, err
    end
    local old = slot.cur
    slot.cur = e
    slot.failed_stamp = nil
    slot.reload_error = nil
    slot.file_state = nil
    slot.loads = (slot.loads or 0) + 1
    e.loaded_at = ngx.now()
    inc("wisp_model_reloads_total", lbl(slot.name, 'result="ok"'))
    log(ngx.NOTICE, "model '", slot.name, "' ", old and "reloaded" or "loaded", " (", why or "start", "): ", slot.path,
        " version ", e.version, " on ", e.device, fmt(" in %.1f ms", (S.clock() - t0) * 1e3))
    if old then
        old.retired = true
        if old.inflight <= 0 then old:close() end
    end
    set_gauges(slot)
    return true
end

local function check_all(premature)
    if premature then return end
    local dict = ngx.shared[S.cfg.shm]
    local models = S.models
    for _, name in ipairs(S.model_names) do
        local slot = models[name]
        local gen = dict and dict:get("gen\t" .. name) or 0
        if gen ~= slot.gen then
            slot.gen = gen
            reload_slot(slot, true, "reload request")
        else
            reload_slot(slot, false, "file changed")
        end
    end
end


M.Entry = Entry
M.float_buf = float_buf
M.open_entry = open_entry
M.reload_slot = reload_slot
M.check_all = check_all

return M
