-- wisp/nginx/config.lua — the service's options: their defaults, the models list, and
-- configure{}, which only records them (init_by_lua runs before nginx forks its workers).

local S = require "wisp.nginx.state"

local type, tostring, tonumber, pairs, ipairs, error = type, tostring, tonumber, pairs, ipairs, error

local M = {}

local DEFAULTS = {
    models = nil, device = "auto", mode = "device", thread_pool = "wisp",
    batching = false, batch_max_rows = 64, batch_max_delay_us = 500, batch_queue = 4096,
    max_rows_per_request = 10000, reload_check_s = 1, shm = "wisp", engine_threads = 1,
    flush_s = 0.2, lag_check_s = 0.01, thread_min_bytes = 16384, thread_slots = 2,
    cpu_mode = "inline", gpu_mode = "auto",     -- what mode = "device" (the default) picks
    admin = "open",          -- "open": :reload and /metrics on every listener; "separate": only
                             -- where nginx.conf calls handle(true) (serve.sh --admin-port)
}
local MODES = { inline = true, thread = true, async = true, auto = true }

local function parse_models(spec)
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
            elseif type(v) == "table" then list[#list + 1] = { name = v.name or k, path = v.path, device = v.device } end
        end
    end
    if #list == 0 then error("wisp.nginx: configure{models = 'name=path,...'} expected", 3) end
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
        if DEFAULTS[k] == nil and k ~= "models" then error("wisp.nginx.configure: unknown option '" .. tostring(k) .. "'", 2) end
        c[k] = v
    end
    c.models = parse_models(opts.models)
    if not MODES[c.mode] and c.mode ~= "device" then
        error("wisp.nginx.configure: mode: device, inline, thread, async or auto expected, got " .. tostring(c.mode), 2)
    end
    for _, k in ipairs { "cpu_mode", "gpu_mode" } do
        if not MODES[c[k]] then
            error("wisp.nginx.configure: " .. k .. ": inline, thread, async or auto expected, got " .. tostring(c[k]), 2)
        end
    end
    if c.admin ~= "open" and c.admin ~= "separate" then
        error("wisp.nginx.configure: admin: open or separate expected, got " .. tostring(c.admin), 2)
    end
    if c.batching == "on" or c.batching == "1" then c.batching = true
    elseif c.batching == "off" or c.batching == "0" then c.batching = false end
    for _, k in ipairs { "max_rows_per_request", "batch_max_rows", "batch_max_delay_us", "batch_queue",
                         "reload_check_s", "engine_threads", "flush_s", "lag_check_s", "thread_min_bytes", "thread_slots" } do
        c[k] = tonumber(c[k]) or error("wisp.nginx.configure: " .. k .. ": number expected", 2)
    end
    S.cfg = c
    return true
end

M.DEFAULTS = DEFAULTS
M.MODES = MODES
M.parse_models = parse_models

return M
