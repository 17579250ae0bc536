-- wisp/nginx/worker.lua — init_worker: this worker's engine, its models (files and the model
-- repository's versions) loaded, the mode chosen from the devices they landed on, and the
-- timers (reload and repository checks, metrics flush, loop lag).

local S = require "wisp.nginx.state"
local H = require "wisp.nginx.http"
local MT = require "wisp.nginx.metrics"
local MD = require "wisp.nginx.models"

local type, ipairs, error = type, ipairs, error
local check_all = MD.check_all
local series, hobserve, set_gauges = MT.series, MT.hobserve, MT.set_gauges
local log = S.log
local models, model_names = S.models, S.model_names

local M = {}

-- init_worker_by_lua: this worker's engine, models and timers.
function M.init_worker()
    local cfg = S.cfg
    if not cfg then error("wisp.nginx.init_worker: configure{} was not called in init_by_lua", 2) end
    S.load_libs()
    H.init_body_ptr()
    local engine, err = S.new_engine(cfg.engine_threads)
    S.engine = engine
    if not engine then log(ngx.ERR, "engine: ", err) end
    local dict = ngx.shared[cfg.shm]
    if not dict then log(ngx.ERR, "lua_shared_dict '", cfg.shm, "' is not declared: no metrics, no :reload") end
    -- the models' slots (the configured files, the repository's directories), each loaded
    -- and warmed up before it serves (lua/wisp/nginx/models.lua)
    MD.start_models()
    if cfg.mode == "device" then
        -- the default: the faster mode measured on the device the models landed on
        -- (scripts/results/bench_nginx-*.json): cpu_mode = inline on a CPU (scoring in the
        -- event loop costs least), gpu_mode = auto on a GPU (100-row requests: 1.58M rows/s
        -- auto against 0.92M inline on the H200). Decided once, as the worker starts, from
        -- the devices the models loaded then landed on (or, not loaded, were asked for).
        local gpu = false
        for _, name in ipairs(model_names) do
            local slot = models[name]
            local dev = slot.cur and slot.cur.device or slot.device
            if type(dev) == "string" and dev:match("^gpu") then gpu = true end
        end
        cfg.mode = gpu and cfg.gpu_mode or cfg.cpu_mode
        cfg.mode_by_device = true
        log(ngx.NOTICE, "mode ", cfg.mode, " (the default for ", gpu and "a GPU" or "the CPU", "; set mode to choose)")
    end
    if cfg.mode == "thread" or cfg.mode == "auto" then
        -- at most thread_slots calls in the pool at once per worker: lua-nginx-module makes a
        -- Lua VM for every queued call (and each VM maps and checks the model once), so an
        -- unbounded queue would make a VM, and a model load, per concurrent request
        S.thread_sema = require("ngx.semaphore").new(cfg.thread_slots)
    end
    if engine then
        ngx.timer.every(cfg.reload_check_s, check_all)
        ngx.timer.every(cfg.flush_s, function(premature)
            for _, name in ipairs(model_names) do set_gauges(models[name]) end
            MT.flush()
        end)
        if cfg.lag_check_s > 0 then
            -- the event loop's lag: how late a timer every lag_check_s fires. A request scored
            -- inline, a long GC step, or the worker's core taken by another task; a stall of d
            -- is seen when a tick falls in it (at 10 ms, every stall over 10 ms is). nginx
            -- timers count milliseconds: up to ~1 ms late is their resolution. Each tick costs
            -- a few µs (lua-nginx-module runs a timer in a coroutine of its own).
            local lag_sr = series("wisp_event_loop_lag_seconds", "")
            local clock = S.clock
            local due = clock() + cfg.lag_check_s
            ngx.timer.every(cfg.lag_check_s, function(premature)
                if premature then return end
                local now = clock()
                local lag = now - due
                hobserve(lag_sr, lag > 0 and lag or 0)
                due = now + cfg.lag_check_s
            end)
        end
    end
end

return M
