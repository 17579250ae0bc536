-- wisp/nginx/models.lua — models, their versions and hot reload: an entry is one loaded version of
-- one model file (model, description, raw batch, session, batcher, warm-up); a version slot's
-- reload loads a changed file into a new entry and swaps it in, refusing files changed in place;
-- a model slot serves the versions its version policy names (the model repository,
-- MODELS/name/N/model.wisp) or its one file (--models name=path: version "1"); and the
-- repository extension's logic (index, load, unload) that routes answer.
--
-- The interface the endpoints use (v1 and v2 alike):
--   MD.resolve(name, version_or_nil) -> entry, slot | nil, http_status, message
--       version nil: the latest ready version under the policy (what v1 serves, slot.cur).
--       entry.version is the version's name ("1", "2": the repository's directory, "1" for a
--       single-file model), entry.version_id the file's identity (its header checksum's first
--       12 hex digits, as v1 reported before versions), entry.warmup_ms the warm-up's time,
--       entry.warmup = {ms, rows, devices = {...}}, entry.session/.batch/.tr/... as before.
--       A request holds the entry (e.inflight = e.inflight + 1) and ends with e:release():
--       a retired version (removed, or out of the policy) closes after its last request, and
--       release counts the request in wisp_model_requests_total{model, version}.
--   MD.versions(name) -> list of {version, state = "READY"|"UNAVAILABLE"|"LOADING", reason}
--       (LOADING is not seen in practice: a worker loads and warms a version up inside one
--       timer callback, without yielding, so no request of that worker runs meanwhile)
--   MD.repository_index([ready_only]) -> list of {name, version, state, reason}
--   MD.repository_load(name), MD.repository_unload(name) -> true | nil, http_status, message
--       (every worker follows within reload_check_s, through the shared dict)

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

-- The version a thread VM's entry stands for (thread.lua opens entries by path, without
-- a version): the N of a repository path .../NAME/N/model.wisp, else "1".
local function version_of_path(name, path)
    local v = path:match("/" .. name:gsub("%p", "%%%0") .. "/([1-9]%d*)/model%.wisp$")
    return v or "1"
end

-- Warm-up: a version is ready only after a batch has been scored on every device its
-- sessions score on, so that no request pays a first call's cost (a GPU's context, module
-- load and first allocations; the CPU's first page faults): WARMUP_ROWS rows of feature
-- ids spread over the table (row 0 empty: it must score the bias, not NaN) through the
-- session, and for a model with columns WARMUP_ROWS raw rows (every input missing) through
-- the fused path (score_raw), as the service's requests take both. On "gpus" the rows are
-- split across the GPUs, so each gets some. The time taken is e.warmup_ms.
local WARMUP_ROWS = 256
local warm_lines = nil
local function warm_up(e)
    local t0 = S.clock()
    local nf = e.info.num_features
    local b = e.batch
    for i = 0, WARMUP_ROWS - 1 do
        local ids = {}
        if i > 0 and nf > 0 then
            ids[1] = (i * 2654435761) % nf
            ids[2] = (i * 40503 + 7) % nf
            if ids[2] == ids[1] then ids[2] = nil end
        end
        assert(b:add(ids))
    end
    if WARMUP_ROWS > e.outcap then e.outcap = WARMUP_ROWS; e.out = float_buf(e.outcap) end
    local out = assert(e.session:score(b, e.out))
    for i = 0, WARMUP_ROWS - 1 do
        if out[i] ~= out[i] then error(fmt("warm-up row %d scored NaN", i), 0) end
    end
    b:clear()
    local devices = { e.session:last_device() }
    if e.tr then
        warm_lines = warm_lines or ("{}\n"):rep(WARMUP_ROWS)
        e.tr:clear()
        assert(e.tr:parse_jsonl_buf(warm_lines, #warm_lines, WARMUP_ROWS + 1))
        assert(e.session:score_raw(e.tr, e.out))
        e.tr:clear()
    end
    local ms = (S.clock() - t0) * 1e3
    e.warmup_ms = ms
    e.warmup = { ms = ms, rows = WARMUP_ROWS, raw_rows = e.tr and WARMUP_ROWS or 0, devices = devices }
    return devices[1]
end

-- The batcher's session is a second session: warmed up too (one row), its time added.
local function warm_up_batcher(e)
    local t0 = S.clock()
    local b = assert(S.engine:batch())
    assert(b:add({}))
    local ok, out = pcall(function() return assert(e.bsession:score(b, e.out)) end)
    b:close()
    if not ok then error(out, 0) end
    local ms = (S.clock() - t0) * 1e3
    e.warmup_ms = e.warmup_ms + ms
    e.warmup.ms = e.warmup_ms
    e.warmup.devices[#e.warmup.devices + 1] = e.bsession:last_device()
end

-- Load path into a new entry: model, columns transformer (when the model has
-- columns), a session on `device`, the warm-up. version: the version's name ("1", "2";
-- default: from the path, see version_of_path). Returns entry or nil, err.
local function open_entry(name, path, device, version)
    if type(version) ~= "string" then version = version_of_path(name, path) end
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
    e.pin = pin_file(path, fileinfo)
    e.info = model:info()
    e.version = version
    e.version_id = e.checksum and e.checksum:sub(1, 12) or stamp
    e.req_label = lbl(name, nil, version)
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
        e.device = warm_up(e)
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
    inc("wisp_model_requests_total", self.req_label)
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
    local wok, werr = pcall(warm_up_batcher, e)
    if not wok then return nil, "warm-up: " .. tostring(werr) end
    return true
end

-- an entry leaves service: closed now, or by the release of its last request
local function retire(e)
    e.retired = true
    if e.inflight <= 0 and not e.closed then e:close() end
end

-- (Re)load one version slot (a single-file model's slot is its own version "1"). force (a
-- :reload request): try even a file that failed before.
-- -> true[, "unchanged"] or nil, err. Debounced: a file whose stat identity (inode,
-- size, mtime) and header checksum are the serving version's is not mapped again
-- ("unchanged"); a file changed in place (the serving version's inode, with another
-- size, mtime or checksum: cp over it, truncate, a few bytes rewritten) is refused
-- without being read, since the serving copy is what was verified and a file being
-- written in place may be half-written; the refusal is logged once per state of the
-- file and reported in /v1/models/NAME ("file") and /readyz.
local function reload_version(slot, force, why)
    local stamp, info = file_stamp(slot.path)
    if stamp == nil and not force then
        if not slot.missing_logged then
            log(ngx.ERR, "model '", slot.name, "': ", slot.path, " is missing; keeping the loaded version")
            slot.missing_logged = true
        end
        slot.file_state = slot.cur and { state = "missing; the loaded version keeps serving",
            serving = slot.cur.version } or nil
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
            local err = "changed in place, refused: " .. reason
                .. "; replace a model file by rename (mv) in its directory"
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
    local e, err = open_entry(slot.name, slot.path, slot.device, slot.version or "1")
    if e then
        local ok, berr = attach_batcher(e)
        if not ok then e:close(); e, err = nil, "batcher: " .. tostring(berr) end
    end
    if not e then
        slot.failed_stamp = stamp
        slot.reload_error = { error = tostring(err), at = ngx.now(), file_stamp = stamp }
        slot.file_state = slot.cur and { state = "failed to load, refused: " .. tostring(err),
            serving = slot.cur.version } or nil
        slot.failures = (slot.failures or 0) + 1
        inc("wisp_model_reloads_total", lbl(slot.name, 'result="failed"'))
        log(ngx.ERR, "model '", slot.name, "': ", slot.cur and "reload failed, the loaded version keeps serving: "
            or "load failed: ", err)
        set_gauges(slot.parent or slot)
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
        " version ", e.version, " (", e.version_id, ") on ", e.device,
        fmt(" in %.1f ms (warm-up %.1f ms)", (S.clock() - t0) * 1e3, e.warmup_ms))
    if old then retire(old) end
    set_gauges(slot.parent or slot)
    return true
end

-- ---- versions and the model repository -------------------------------------------------
--
-- A model slot (S.models[name]): name, device, source ("file": --models name=path, or
-- "repository": MODELS/name/), cur (the entry v1 and a request without a version get: the
-- newest ready version), path (cur's file), versions (version name -> version slot: the
-- versions served or tried), policy, unloaded (the repository extension's unload).
-- A version slot: name, version, path, device, parent (its model slot), cur (its entry) and reload_slot's state
-- (failed_stamp, reload_error, file_state, failures, loads). A single-file model's slot is
-- its own version "1" (slot.versions["1"] == slot), so it reloads as it always did.
--
-- A repository model follows its directory at every check (reload_check_s): the version
-- directories are the names of positive integers (1, 2, 10; sorted as numbers) holding a
-- model.wisp; the policy (MODELS/name/config.json's "version_policy" (its only key read), else configure{}'s
-- version_policy, default latest 1) names the versions to serve among them; each is loaded
-- (and warmed up) before it serves. A version the policy no longer names leaves once one
-- the policy names is ready (a new version that fails to load leaves the old serving); a
-- version whose model.wisp is gone leaves at once. Leaving = no new request gets it; the
-- requests holding it finish (retire). A model.wisp renamed over in a version directory is
-- that version's hot reload (the same rules as a single file).

local CFG = require "wisp.nginx.config"
local parse_policy, policy_text = CFG.parse_policy, CFG.policy_text

local function vnum(v) return tonumber(v) or 0 end
local function by_num(a, b) return vnum(a) < vnum(b) end

local function sorted_versions(slot)
    local list = {}
    for v in pairs(slot.versions) do list[#list + 1] = v end
    table.sort(list, by_num)
    return list
end

local function dict() return S.cfg and ngx.shared[S.cfg.shm] or nil end

-- insert name into S.model_names (sorted, in place: routes hold the table)
local function add_name(name)
    local names = S.model_names
    names[#names + 1] = name
    table.sort(names)
end

-- the policy of a repository model: MODELS/name/config.json's "version_policy" (re-read
-- when the file changes), else the configuration's. -> policy, or nil, err (a bad
-- config.json: the model keeps the versions it serves, and says why)
local function read_policy(slot)
    local cpath = slot.dir .. "/config.json"
    local stamp = file_stamp(cpath)
    if stamp == slot.config_stamp and slot.policy then return slot.policy end
    slot.config_stamp = stamp
    slot.config_error = nil
    local pol
    if stamp then
        local text, rerr = F.read_small(cpath, 65536)
        local cfgj = text and S.cjson.decode(text)
        if type(cfgj) ~= "table" then
            slot.config_error = cpath .. ": " .. (rerr or "not a JSON object")
        elseif cfgj.version_policy ~= nil then
            local p, perr = parse_policy(cfgj.version_policy)
            if not p then slot.config_error = cpath .. ": version_policy: " .. perr else pol = p end
        end
    end
    if slot.config_error then
        log(ngx.ERR, "model '", slot.name, "': ", slot.config_error, "; keeping the policy ",
            slot.policy and policy_text(slot.policy) or "of the configuration")
        return slot.policy or S.cfg.policy
    end
    return pol or S.cfg.policy
end

-- the version directories of a repository model that hold a model.wisp: list of version
-- names (sorted as numbers), and the set of those without one (name -> true)
local function scan_versions(slot)
    local names = F.list_dir(slot.dir)
    local avail, empty = {}, {}
    for _, n in ipairs(names or {}) do
        if n:match("^[1-9]%d*$") and #n <= 15 then
            local vdir = slot.dir .. "/" .. n
            if F.is_dir(vdir) then
                if file_stamp(vdir .. "/model.wisp") then avail[#avail + 1] = n else empty[n] = true end
            end
        end
    end
    table.sort(avail, by_num)
    return avail, empty, names ~= nil
end

-- the versions of avail (sorted as numbers) that policy p names: a set
local function wanted_by(p, avail)
    local w = {}
    if p.kind == "all" then
        for _, v in ipairs(avail) do w[v] = true end
    elseif p.kind == "latest" then
        for i = #avail, math.max(1, #avail - p.n + 1), -1 do w[avail[i]] = true end
    else
        for _, v in ipairs(avail) do if p.set[v] then w[v] = true end end
    end
    return w
end

-- the model slot's view for v1 and a request without a version: the newest ready
-- version, its path, and its reload state; the metrics' gauges
local function select_latest(slot)
    local best
    for _, v in ipairs(sorted_versions(slot)) do
        local vs = slot.versions[v]
        if vs.cur and not vs.cur.retired then best = vs end
    end
    slot.cur = best and best.cur or nil
    if best then slot.path = best.path end
    -- v1's reload report: the newest version's, or (none ready) the newest failure
    local newest = slot.versions[slot.wanted_top or ""] or best
    slot.reload_error = newest and newest.reload_error or nil
    slot.file_state = best and best.file_state or nil
    local loads, failures = 0, 0
    for _, vs in pairs(slot.versions) do loads = loads + (vs.loads or 0); failures = failures + (vs.failures or 0) end
    slot.loads, slot.failures = loads + (slot.loads_gone or 0), failures + (slot.failures_gone or 0)
    set_gauges(slot)
end

local function drop_version(slot, v, why)
    local vs = slot.versions[v]
    if not vs then return end
    if vs.cur then
        log(ngx.NOTICE, "model '", slot.name, "' version ", v, " leaves service (", why, ")",
            vs.cur.inflight > 0 and fmt("; %d request(s) in flight finish on it", vs.cur.inflight) or "")
        retire(vs.cur)
        vs.cur = nil
    end
    slot.loads_gone = (slot.loads_gone or 0) + (vs.loads or 0)
    slot.failures_gone = (slot.failures_gone or 0) + (vs.failures or 0)
    slot.versions[v] = nil
    MT.drop_version_gauges(slot.name, v)
end

-- a repository model's versions made what its directory and policy say (see above).
-- force: reload every version now (load, :reload, a new generation).
local function sync_repository(slot, force, why)
    if slot.unloaded then
        for v in pairs(slot.versions) do drop_version(slot, v, "unloaded") end
        select_latest(slot)
        return true
    end
    local p = read_policy(slot)
    slot.policy = p
    local avail, empty, listed = scan_versions(slot)
    slot.available, slot.empty = avail, empty
    local wanted = wanted_by(p, avail)
    slot.wanted, slot.wanted_top = wanted, nil
    for i = #avail, 1, -1 do if wanted[avail[i]] then slot.wanted_top = avail[i]; break end end
    local any_ready = false
    for _, v in ipairs(avail) do
        if wanted[v] then
            local vs = slot.versions[v]
            local vwhy = why
            if not vs then
                vs = { name = slot.name, version = v, path = slot.dir .. "/" .. v .. "/model.wisp",
                       device = slot.device, parent = slot, gen = 0 }
                slot.versions[v] = vs
                if why == "file changed" then vwhy = "new version under the policy " .. policy_text(p) end
            end
            reload_version(vs, force, vwhy)
            if vs.cur then any_ready = true end
        end
    end
    local present = {}
    for _, v in ipairs(avail) do present[v] = true end
    for _, v in ipairs(sorted_versions(slot)) do
        if not wanted[v] then
            if not present[v] then
                drop_version(slot, v, listed and "its model.wisp is gone" or ("cannot list " .. slot.dir))
            elseif any_ready then
                drop_version(slot, v, "not in the version policy (" .. policy_text(p) .. ")")
            else
                slot.versions[v].kept = "kept serving: none of the versions the policy names ("
                    .. policy_text(p) .. ") is ready"
            end
        else
            slot.versions[v].kept = nil
        end
    end
    select_latest(slot)
    return slot.cur ~= nil, slot.cur == nil and (slot.reload_error and slot.reload_error.error
        or ("no version of '" .. slot.name .. "' to serve in " .. slot.dir .. " (policy " .. policy_text(p)
            .. ")")) or nil
end

-- one model slot brought up to date: its file (single-file) or its directory (repository)
local function sync_slot(slot, force, why)
    if slot.source == "repository" then return sync_repository(slot, force, why) end
    if slot.unloaded then
        if slot.cur then
            log(ngx.NOTICE, "model '", slot.name, "' unloaded", slot.cur.inflight > 0
                and fmt("; %d request(s) in flight finish on it", slot.cur.inflight) or "")
            retire(slot.cur)
            slot.cur = nil
        end
        set_gauges(slot)
        return true
    end
    local ok, err = reload_version(slot, force, why)
    return slot.cur ~= nil and ok, err
end

-- (Re)load a model slot (v1's :reload, and every check): its file, or its repository
-- directory's versions. -> true[, "unchanged"] or nil, err
local function reload_slot(slot, force, why)
    if slot.unloaded then
        return nil,
            "model '" .. slot.name .. "' is unloaded (POST /v2/repository/models/" .. slot.name .. "/load loads it)"
    end
    if slot.source == "repository" then return sync_repository(slot, force, why) end
    return reload_version(slot, force, why)
end

local function new_repository_slot(name, dir)
    local cfg = S.cfg
    local slot = { name = name, source = "repository", dir = dir, device = cfg.device, versions = {},
                   gen = 0, path = dir }
    local d = dict()
    if d then
        slot.gen = d:get("gen\t" .. name) or 0
        slot.unloaded = d:get("unloaded\t" .. name) and true or nil
    end
    S.models[name] = slot
    add_name(name)
    return slot
end

local function new_file_slot(m)
    local cfg = S.cfg
    local slot = { name = m.name, path = m.path, device = m.device or cfg.device, source = "file",
                   version = "1", versions = {} }
    slot.versions["1"] = slot
    local d = dict()
    if d then
        slot.gen = d:get("gen\t" .. m.name) or 0
        slot.unloaded = d:get("unloaded\t" .. m.name) and true or nil
    end
    S.models[m.name] = slot
    add_name(m.name)
    return slot
end

local REPO_NAME = "^[%w_][%w_.%-]*$"

-- a repository model whose directory left the repository: its versions leave (requests in
-- flight finish on them) and the name is no longer served (404, as a name never served)
local function remove_model(name)
    local slot = S.models[name]
    for v in pairs(slot.versions) do drop_version(slot, v, "its directory left the repository") end
    slot.cur = nil
    S.models[name] = nil
    local names = S.model_names
    for i = #names, 1, -1 do if names[i] == name then table.remove(names, i) end end
    MT.drop_model_gauges(name)
    log(ngx.NOTICE, "model '", name, "' left the repository (", slot.dir, " is gone): no longer served")
end

-- new model directories in the repository become slots (loaded by the caller's sync); a
-- repository model whose directory is gone from a listing that succeeded is removed
local function scan_repository()
    local root = S.cfg.model_repository
    if not root then return {} end
    local names, err = F.list_dir(root)
    if not names then
        if not S.repo_error_logged then log(ngx.ERR, "model repository: ", err); S.repo_error_logged = true end
        return {}
    end
    S.repo_error_logged = nil
    local new = {}
    for _, n in ipairs(names) do
        local slot = S.models[n]
        if not slot and n:match(REPO_NAME) and F.is_dir(root .. "/" .. n) then
            new[#new + 1] = new_repository_slot(n, root .. "/" .. n)
        elseif slot and slot.source == "file" and not slot.shadow_logged and F.is_dir(root .. "/" .. n) then
            slot.shadow_logged = true
            log(ngx.WARN, "model '", n, "' is both in models (", slot.path, ") and in the repository (", root, "/", n,
                "): the models file is served")
        end
    end
    local present = {}
    for _, n in ipairs(names) do present[n] = true end
    local gone = {}
    for _, n in ipairs(S.model_names) do
        local slot = S.models[n]
        if slot.source == "repository" and (not present[n] or not F.is_dir(slot.dir)) then gone[#gone + 1] = n end
    end
    for _, n in ipairs(gone) do remove_model(n) end
    return new
end

-- init_worker: the slots of the configured models and of the repository, loaded
local function start_models()
    for _, m in ipairs(S.cfg.models) do new_file_slot(m) end
    scan_repository()
    if not S.engine then return end
    for _, name in ipairs(S.model_names) do sync_slot(S.models[name], true, "start") end
end

local function check_all(premature)
    if premature then return end
    local d = dict()
    for _, slot in ipairs(scan_repository()) do sync_slot(slot, true, "new in the repository") end
    local models = S.models
    for _, name in ipairs(S.model_names) do
        local slot = models[name]
        local unl = d and d:get("unloaded\t" .. name) and true or nil
        local gen = d and d:get("gen\t" .. name) or 0
        local force, why = false, "file changed"
        if unl ~= slot.unloaded then slot.unloaded = unl; force, why = true, unl and "unload" or "load" end
        if gen ~= slot.gen then slot.gen = gen; force, why = true, "reload request" end
        if not slot.unloaded or force then sync_slot(slot, force, why) end
    end
end

-- ---- the interface of the endpoints ------------------------------------------------------

local function not_ready_reason(slot, vs)
    if slot.unloaded then return "unloaded (the repository extension's unload)" end
    if vs and vs.reload_error then return vs.reload_error.error end
    if vs and not vs.cur then return "not loaded" end
    return nil
end

-- MD.resolve(name, version) -> entry, slot | nil, status, message (see the top)
local function resolve(name, version)
    local slot = S.models[name]
    if not slot then return nil, 404, "unknown model '" .. tostring(name) .. "'" end
    if version == nil or version == "" then
        local e = slot.cur
        if e and not e.retired then return e, slot end
        -- (no closure here: a function made per call stops LuaJIT compiling resolve and its callers)
        local r = not_ready_reason(slot, slot.versions[slot.wanted_top or "1"])
        return nil, 503, "model '" .. name .. "' has no ready version" .. (r and (": " .. r) or "")
    end
    version = tostring(version)
    local vs = slot.versions[version]
    if not vs then
        local served = sorted_versions(slot)
        local why = ""
        if slot.available then
            for _, v in ipairs(slot.available) do
                if v == version then why = " (it is not in the version policy: " .. policy_text(slot.policy) .. ")" end
            end
        end
        return nil, 404, "model '" .. name .. "' has no version '" .. version .. "'" .. why
            .. "; versions served: " .. (#served > 0 and table.concat(served, ", ") or "none")
    end
    local e = vs.cur
    if not e or e.retired then
        return nil, 503, "version " .. version .. " of model '" .. name .. "' is not ready: "
            .. (not_ready_reason(slot, vs) or "not loaded")
    end
    return e, slot
end

-- MD.versions(name) -> list of {version, state, reason} (nil, 404, msg for an unknown name):
-- the versions served or tried, then the other version directories (UNAVAILABLE)
local function versions(name)
    local slot = S.models[name]
    if not slot then return nil, 404, "unknown model '" .. tostring(name) .. "'" end
    local list, seen = {}, {}
    for _, v in ipairs(sorted_versions(slot)) do
        local vs = slot.versions[v]
        seen[v] = true
        if vs.cur and not vs.cur.retired and not slot.unloaded then
            list[#list + 1] = { version = v, state = "READY", reason = vs.kept or "", warmup_ms = vs.cur.warmup_ms }
        else
            list[#list + 1] = { version = v, state = "UNAVAILABLE",
                                reason = not_ready_reason(slot, vs) or "not loaded" }
        end
    end
    if slot.source == "file" and not seen["1"] then
        list[#list + 1] = { version = "1", state = "UNAVAILABLE", reason = not_ready_reason(slot) or "not loaded" }
    end
    for _, v in ipairs(slot.available or {}) do
        if not seen[v] then
            seen[v] = true
            list[#list + 1] = { version = v, state = "UNAVAILABLE",
                                reason = slot.unloaded and "unloaded (the repository extension's unload)"
                                    or ("not in the version policy (" .. policy_text(slot.policy) .. ")") }
        end
    end
    for v in pairs(slot.empty or {}) do
        if not seen[v] then list[#list + 1] = { version = v, state = "UNAVAILABLE",
            reason = "no model.wisp in " .. slot.dir .. "/" .. v } end
    end
    table.sort(list, function(a, b) return by_num(a.version, b.version) end)
    return list
end

-- MD.repository_index(ready_only) -> list of {name, version, state, reason}: one row per
-- version of each model (a model with no version at all: one row without a version)
local function repository_index(ready_only)
    local rows = {}
    for _, name in ipairs(S.model_names) do
        local list = versions(name)
        if #list == 0 and not ready_only then
            local slot = S.models[name]
            rows[#rows + 1] = { name = name, state = "UNAVAILABLE",
                                reason = not_ready_reason(slot) or ("no version directory with a model.wisp in "
                                    .. tostring(slot.dir)) }
        end
        for _, r in ipairs(list) do
            if not ready_only or r.state == "READY" then
                rows[#rows + 1] = { name = name, version = r.version, state = r.state, reason = r.reason }
            end
        end
    end
    return rows
end

-- MD.repository_load(name): (re)load the model in every worker: the repository's directory
-- (a model new there too) or its file; undoes an unload.
local function repository_load(name)
    if type(name) ~= "string" or not name:match(REPO_NAME) then return nil, 400, "bad model name" end
    local slot = S.models[name]
    if not slot then
        local root = S.cfg.model_repository
        if not root then return nil, 404, "unknown model '" .. name .. "' (no model repository is configured)" end
        if not F.is_dir(root .. "/" .. name) then return nil, 404,
            "no model '" .. name .. "' in the repository (" .. root .. ")" end
        slot = new_repository_slot(name, root .. "/" .. name)
    end
    local d = dict()
    if d then
        d:delete("unloaded\t" .. name)
        slot.gen = d:incr("gen\t" .. name, 1, 0) or slot.gen
    end
    slot.unloaded = nil
    if not S.engine then return nil, 503, "this worker has no engine" end
    local ok, err = sync_slot(slot, true, "repository load")
    -- 400 as Triton answers a failed load: what failed is the repository's content
    if not ok then return nil, 400, "failed to load '" .. name .. "': " .. tostring(err or "no version ready") end
    return true
end

-- MD.repository_unload(name): every worker stops serving the model (requests in flight
-- finish); /v1 and /v2 answer 503 for it until a load.
local function repository_unload(name)
    local slot = type(name) == "string" and S.models[name]
    if not slot then return nil, 404, "unknown model '" .. tostring(name) .. "'" end
    local d = dict()
    if d then
        d:set("unloaded\t" .. name, true)
        slot.gen = d:incr("gen\t" .. name, 1, 0) or slot.gen
    end
    slot.unloaded = true
    sync_slot(slot, true, "unload")
    return true
end

M.Entry = Entry
M.open_entry = open_entry
M.reload_slot = reload_slot
M.check_all = check_all
M.start_models = start_models
M.sync_slot = sync_slot
M.resolve = resolve
M.versions = versions
M.repository_index = repository_index
M.repository_load = repository_load
M.repository_unload = repository_unload
M.WARMUP_ROWS = WARMUP_ROWS

return M
