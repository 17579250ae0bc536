-- wisp/nginx/config.lua — the service's options: their defaults, the models list, the version
-- policies, and configure{}, which only records them (init_by_lua runs before nginx forks its
-- workers).

local S = require "wisp.nginx.state"

local type, tostring, tonumber, pairs, ipairs, error = type, tostring, tonumber, pairs, ipairs, error

local M = {}

local DEFAULTS = {
    models = nil, device = "auto", mode = "device", thread_pool = "wisp",
    batching = false, batch_max_rows = 64, batch_max_delay_us = 500, batch_queue = 4096,
    max_rows_per_request = 10000, reload_check_s = 1, shm = "wisp", engine_threads = 1,
    flush_s = 0.2, lag_check_s = 0.01, thread_min_bytes = 16384, thread_slots = 2,
    cpu_mode = "inline", gpu_mode = "auto",     -- what mode = "device" (the default) picks
    admin = "open",          -- "open": :reload, /metrics and the v2 repository extension on every
                             -- listener; "separate": only where nginx.conf calls handle(true)
                             -- (serve.sh --admin-port)
    model_repository = false,  -- a directory MODELS/name/N/model.wisp (serve.sh --model-repository)
    version_policy = "latest:1",   -- a repository model's versions, unless its config.json says
}
local MODES = { inline = true, thread = true, async = true, auto = true }

-- A version policy (which of a repository model's versions are served), as Triton's
-- model configuration says it: "latest" / "latest:N" / {latest = {num_versions = N}} (the N
-- highest-numbered versions; N = 1 by default), "all" / {all = {}}, "specific:1,3" /
-- {specific = {versions = {1, 3}}}. -> {kind = "latest", n = N} | {kind = "all"} |
-- {kind = "specific", versions = {"1", "3"}, set = {["1"] = true, ...}}; or nil, err.
local function parse_policy(v)
    local function version_list(items)
        local vs, set = {}, {}
        for _, x in ipairs(items) do
            local s = tostring(x)
            if type(x) == "number" and x == math.floor(x) then s = string.format("%d", x) end
            if not s:match("^[1-9]%d*$") or #s > 15 then return nil,
                "a version is a positive integer, got '" .. s .. "'" end
            if not set[s] then vs[#vs + 1] = s; set[s] = true end
        end
        if #vs == 0 then return nil, "specific: at least one version expected" end
        table.sort(vs, function(a, b) return tonumber(a) < tonumber(b) end)
        return { kind = "specific", versions = vs, set = set }
    end
    if type(v) == "string" then
        local kind, arg = v:match("^%s*(%a+)%s*:?%s*(.-)%s*$")
        if kind == "latest" then
            local n = arg == "" and 1 or tonumber(arg)
            if not n or n < 1 or n ~= math.floor(n) then return nil,
                "latest:N: a positive integer N expected, got '" .. arg .. "'" end
            return { kind = "latest", n = n }
        elseif kind == "all" and arg == "" then
            return { kind = "all" }
        elseif kind == "specific" then
            local items = {}
            for x in arg:gmatch("[^,%s]+") do items[#items + 1] = x end
            return version_list(items)
        end
        return nil, "latest[:N], all or specific:V,V,... expected, got '" .. v .. "'"
    elseif type(v) == "table" then
        local n = 0
        for _ in pairs(v) do n = n + 1 end
        if n ~= 1 then return nil, "one of latest, all, specific expected" end
        if v.latest ~= nil then
            local nv = type(v.latest) == "table" and v.latest.num_versions or 1
            nv = tonumber(nv)
            if not nv or nv < 1 or nv ~= math.floor(nv) then return nil,
                "latest.num_versions: a positive integer expected" end
            return { kind = "latest", n = nv }
        elseif v.all ~= nil then
            return { kind = "all" }
        elseif v.specific ~= nil then
            if type(v.specific) ~= "table" or type(v.specific.versions) ~= "table" then
                return nil, "specific.versions: a list of versions expected"
            end
            return version_list(v.specific.versions)
        end
        return nil, "one of latest, all, specific expected"
    end
    return nil, "a string or a table expected, got " .. type(v)
end

-- a policy said in words: "latest 2", "all", "specific 1,3"
local function policy_text(p)
    if not p then return "?" end
    if p.kind == "latest" then return "latest " .. p.n end
    if p.kind == "all" then return "all" end
    return "specific " .. table.concat(p.versions, ",")
end

-- a policy as the v2 metadata (and Triton's configuration) say it
local function policy_table(p)
    if p.kind == "latest" then return { latest = { num_versions = p.n } } end
    if p.kind == "all" then return { all = {} } end
    local vs = {}
    for i, v in ipairs(p.versions) do vs[i] = tonumber(v) end
    return { specific = { versions = vs } }
end

local function parse_models(spec, allow_empty)
    local list = {}
    if type(spec) == "string" then
        for item in spec:gmatch("[^,%s]+") do
            local name, path = item:match("^([%w_.%-]+)=(.+)$")
            if not name then error("wisp.nginx: models: 'name=path' expected, got '" .. item .. "'", 3) end
            list[#list + 1] = { name = name, path = path }
        end
    elseif type(spec) == "table" then
        for k, v in pairs(spec) do
            if type(k) == "string" and type(v) == "string" then list[#list + 1] = { name = k, path = v }
            elseif type(v) == "table" then list[#list + 1] = { name = v.name or k, path = v.path,
                device = v.device } end
        end
    end
    if #list == 0 and not allow_empty then
        error("wisp.nginx: configure{models = 'name=path,...'} or configure{model_repository = DIR} expected", 3)
    end
    table.sort(list, function(a, b) return a.name < b.name end)
    return list
end

-- configure{models = "name=path,..." or {name = path}, device=, mode=, batching=, ...}
-- In init_by_lua: records options only (examples/openresty/README.md says why).
function M.configure(opts)
    if type(opts) ~= "table" then error("wisp.nginx.configure: options table expected", 2) end
    local c = {}
    for k, v in pairs(DEFAULTS) do c[k] = v end
    for k, v in pairs(opts) do
        if DEFAULTS[k] == nil and k ~= "models" then error("wisp.nginx.configure: unknown option '" .. tostring(k)
            .. "'", 2) end
        c[k] = v
    end
    if c.model_repository == "" then c.model_repository = false end
    if c.model_repository ~= false and type(c.model_repository) ~= "string" then
        error("wisp.nginx.configure: model_repository: a directory expected", 2)
    end
    if c.model_repository then c.model_repository = c.model_repository:gsub("/+$", "") end
    c.models = parse_models(opts.models, c.model_repository ~= false)
    local pol, perr = parse_policy(c.version_policy)
    if not pol then error("wisp.nginx.configure: version_policy: " .. perr, 2) end
    c.policy = pol
    if not MODES[c.mode] and c.mode ~= "device" then
        error("wisp.nginx.configure: mode: device, inline, thread, async or auto expected, got " .. tostring(c.mode), 2)
    end
    for _, k in ipairs { "cpu_mode", "gpu_mode" } do
        if not MODES[c[k]] then
            error("wisp.nginx.configure: " .. k .. ": inline, thread, async or auto expected, got " .. tostring(c[k]),
                2)
        end
    end
    if c.admin ~= "open" and c.admin ~= "separate" then
        error("wisp.nginx.configure: admin: open or separate expected, got " .. tostring(c.admin), 2)
    end
    if c.batching == "on" or c.batching == "1" then c.batching = true
    elseif c.batching == "off" or c.batching == "0" then c.batching = false end
    for _, k in ipairs { "max_rows_per_request", "batch_max_rows", "batch_max_delay_us", "batch_queue",
                         "reload_check_s", "engine_threads", "flush_s", "lag_check_s", "thread_min_bytes",
                             "thread_slots" } do
        c[k] = tonumber(c[k]) or error("wisp.nginx.configure: " .. k .. ": number expected", 2)
    end
    S.cfg = c
    return true
end

M.DEFAULTS = DEFAULTS
M.MODES = MODES
M.parse_models = parse_models
M.parse_policy = parse_policy
M.policy_text = policy_text
M.policy_table = policy_table

return M
