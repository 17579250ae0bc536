-- repl.lua — the commands of `wisp repl` (lines starting with ':'): devices, the model, placement,
-- the batching policy, a quick benchmark with its stage table, traces.
--
-- engine/cli/cli_lua.c hands every line that starts with ':' to M.command(line); the
-- prompt's globals (model, session, pipeline, batching) are the REPL's state, so plain
-- Lua at the prompt sees and changes the same objects.
local wisp = require "wisp"
local placement = require "wisp.placement"
local profile = require "wisp.profile"
local batcher = require "wisp.batcher"

local fmt, concat = string.format, table.concat
local floor, max = math.floor, math.max

local M = {}

local function out(...) io.write(fmt(...), "\n") end

local help = {
    { ":help", "this list" },
    { ":devices", "the CPU and the GPUs, with the GPU status" },
    { ":model", "the loaded model (features, dtype, bias, meta)" },
    { ":load PATH", "load a model (becomes `model`, with `session` and `pipeline`)" },
    { ":placement", "the current placement of the score node" },
    { ":placement DEV", "place scoring on DEV (cpu, gpu, gpu:N, gpus, auto) from the next batch" },
    { ":placement calibrate [quick]", "measure every device over batch sizes; use the faster one per batch" },
    { ":placement save|load FILE", "save / load the calibrated policy (.json or .lua)" },
    { ":placement live", "the calibrated policy's live re-check: where its breaks are now, and why they moved" },
    { ":placement autocal", "the \"auto\" device's own calibration of the model (its probes, as a policy)" },
    { ":batcher", "the batching policy (max_rows, max_delay_us, preferred, max_queue)" },
    { ":batcher k=v ...", "change it, e.g. :batcher max_rows=128 max_delay_us=500 preferred=32,64" },
    { ":batcher run [CALLERS]", "CALLERS coroutines (default 64, at most 100000) send one row each through the batcher" },
    { ":bench [ROWS] [CALLS]", "score CALLS (default 50, at most 1e6) fresh batches of ROWS rows (default 1000, at most 1e6); stage table" },
    { ":trace FILE [ROWS] [CALLS]", "the same, writing a Chrome/Perfetto trace to FILE" },
    { ":stats [reset]", "the session's accumulated per-stage statistics" },
}

-- Counts typed at the prompt: a whole number from 1 to `limit` (digits, or a
-- number like 1e4 that is exactly an integer), else nil after a usage line.
-- Checked before anything is allocated.
local LIMITS = { rows = 1000000, calls = 1000000, callers = 100000 }
local function count_arg(s, name, default, usage)
    if s == nil then return default end
    local n = tonumber(s)
    local limit = LIMITS[name]
    if not n or n ~= n or n < 1 or n > limit or n ~= floor(n) then
        out("%s: %s must be a whole number from 1 to %d, got '%s'", usage, name, limit, tostring(s))
        return nil
    end
    return n
end

local function need_model(G)
    if not G.model or G.model:is_closed() then
        out("no model loaded: start with `wisp repl MODEL` or use :load PATH")
        return false
    end
    if not G.pipeline then G.pipeline = assert(wisp.pipeline { session = G.session, placement = G.session:device() }) end
    return true
end

local function show_placement(G)
    if not need_model(G) then return end
    local p = G.pipeline.placement
    out("score:     %s", placement.describe_node(p.score))
    out("transform: %s", placement.describe_node(p.transform))
    out("session device now: %s; last batch scored on: %s; device switches: %d",
        G.pipeline:device(), G.session:last_device(), G.pipeline.switches)
    local st = G.pipeline:live()
    if st then out("%s", placement.live.describe(st)) end
end

-- :placement live: the live re-check's breaks, zones and moves
local function show_live(G)
    local st = G.pipeline:live()
    if not st then
        out("no live re-check: the score placement is not a calibrated policy (:placement calibrate)")
        return
    end
    out("%s", placement.live.describe(st))
    for _, z in ipairs(st.zones) do
        local parts = {}
        for _, d in ipairs { z.from, z.to } do
            local r = z.ratio[d] and fmt(" (live/calibrated x%.3f)", z.ratio[d]) or ""
            parts[#parts + 1] = fmt("%s %d passes%s", d, z.passes[d], r)
        end
        out("  zone %d..%d rows (%s -> %s): %s", z.lo, z.hi, z.from, z.to, concat(parts, ", "))
    end
    for _, h in ipairs(st.history) do
        out("  moved in %d..%d rows: crossover %s -> %s rows", h.zone[1], h.zone[2],
            #h.before > 0 and concat(h.before, ",") or "none", #h.after > 0 and concat(h.after, ",") or "none")
    end
end

local function devices(G)
    local list, status = wisp.devices(G.model and G.model.engine or nil)
    out("%-8s %-5s %s", "device", "kind", "details")
    for _, d in ipairs(list) do
        if d.kind == "cpu" then
            out("%-8s %-5s %d threads", d.name, d.kind, d.threads)
        else
            out("%-8s %-5s %s, %.1f GiB, sm_%d, %s", d.name, d.kind, d.product, d.memory / 2^30, d.capability,
                d.usable and "usable" or "NOT usable")
        end
    end
    out("GPU status: %s", status ~= "" and status or "ok")
end

local function model_info(G)
    if not need_model(G) then return end
    local i = G.model:info()
    out("path:      %s (%d bytes)", i.path, i.file_size)
    out("features:  %d (%s), bias %.8g, row width used by :bench %d", i.num_features, i.dtype, i.bias,
        placement.row_width(G.model, {}))
    local keys = {}
    for k in pairs(i.meta) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do out("meta:      %s=%s", k, i.meta[k]) end
    out("columns:   %s", i.columns and (#i.columns .. " bytes of feature-column description") or "none")
end

local function batching(G)
    if not G.batching then G.batching = { max_rows = 64, max_delay_us = 1000, preferred = {}, max_queue = 4096 } end
    return G.batching
end

local function show_batching(G)
    local b = batching(G)
    out("max_rows=%d max_delay_us=%g preferred=%s max_queue=%d", b.max_rows, b.max_delay_us,
        #b.preferred > 0 and concat(b.preferred, ",") or "none", b.max_queue)
end

local function set_batching(G, args)
    local b = batching(G)
    local new = { max_rows = b.max_rows, max_delay_us = b.max_delay_us, preferred = b.preferred, max_queue = b.max_queue }
    for _, a in ipairs(args) do
        local k, v = a:match("^([%w_]+)=(.*)$")
        if not k then out("expected key=value, got '%s' (see :help)", a); return end
        if k == "preferred" then
            local p = {}
            for x in v:gmatch("[^,]+") do
                local n = tonumber(x)
                if not n then out("preferred: a list of sizes, got '%s'", v); return end
                p[#p + 1] = n
            end
            new.preferred = p
        elseif k == "max_rows" or k == "max_delay_us" or k == "max_queue" then
            local n = tonumber(v)
            if not n then out("%s: a number expected, got '%s'", k, v); return end
            new[k] = n
        else
            out("unknown batching option '%s' (max_rows, max_delay_us, preferred, max_queue)", k); return
        end
    end
    local ok, err = pcall(function()
        local probe = { score = function() end }
        batcher.new { session = probe, runtime = batcher.scheduler().runtime, max_rows = new.max_rows,
                      max_delay_us = new.max_delay_us, preferred = new.preferred, max_queue = new.max_queue }
    end)
    if not ok then out("%s", tostring(err):gsub("^.-: ", "")); return end
    G.batching = new
    if G.batcher then G.batcher:set(new) end
    show_batching(G)
end

local function bench_batches(G, rows, count)
    local m = G.model
    return placement.random_batches(m.engine, m:num_features(), rows, placement.row_width(m, {}), count, 777)
end

local function run_bench(G, rows, calls, trace_path)
    local usage = trace_path and "usage: :trace FILE [ROWS] [CALLS]" or "usage: :bench [ROWS] [CALLS]"
    rows = count_arg(rows, "rows", 1000, usage)
    if not rows then return end
    calls = count_arg(calls, "calls", 50, usage)
    if not calls then return end
    if not need_model(G) then return end
    local nb = max(1, math.min(8, floor(2e6 / rows)))
    local batches = bench_batches(G, rows, nb)
    local pipe = G.pipeline
    assert(pipe:score(batches[1]))                      -- warm up (device, weights)
    local t0 = placement.now_ns()
    local prof = profile.profile(function()
        for i = 1, calls do
            local ok, err = pipe:score(batches[(i - 1) % nb + 1])
            if not ok then error(err, 0) end
        end
    end)
    local wall = (placement.now_ns() - t0) / 1e9
    for _, b in ipairs(batches) do b:close() end
    out("%d calls x %d rows on %s: %.4f s, %.1f us a call, %.0f rows/s", calls, rows, G.session:last_device(),
        wall, wall / calls * 1e6, rows * calls / wall)
    out("%s", prof:table())
    local e, n = prof:stage_sum_error()
    out("stages sum to each call's wall time within %.2f%% (%d calls)", 100 * e, n)
    if trace_path then
        local ok, err = prof:write(trace_path)
        if ok then out("trace written to %s (%d events): open it in ui.perfetto.dev or chrome://tracing",
                       trace_path, #prof:trace().traceEvents)
        else out("%s", err) end
    end
end

local function batcher_run(G, callers)
    callers = count_arg(callers, "callers", 64, "usage: :batcher run [CALLERS]")
    if not callers then return end
    if not need_model(G) then return end
    local sched = batcher.scheduler()
    local pol = batching(G)
    local b = assert(batcher.new { pipeline = G.pipeline, runtime = sched.runtime, max_rows = pol.max_rows,
                                   max_delay_us = pol.max_delay_us, preferred = pol.preferred, max_queue = pol.max_queue })
    local rows = {}
    local width = placement.row_width(G.model, {})
    local r = placement.rng(99)
    local nf = G.model:num_features()
    for i = 1, callers do
        local ids = {}
        for j = 1, width do ids[j] = r() % nf end
        rows[i] = ids
    end
    local lat, rejected = {}, 0
    for i = 1, callers do
        sched:spawn(function()
            local p, err = b:score(rows[i])
            if not p then rejected = rejected + 1; if rejected == 1 then out("%s", err) end; return end
            local ts, _, td = b:last_timing()
            lat[#lat + 1] = td - ts
        end)
    end
    local t0 = placement.now_ns()
    sched:run()
    local wall = (placement.now_ns() - t0) / 1e3
    local st = b:stats()
    b:close()
    out("%d callers, 1 row each: %.0f us in all; %d batches (mean %.1f rows; full %d, preferred %d, delay %d); rejected %d",
        callers, wall, st.batches, st.mean_batch, st.by_full, st.by_preferred, st.by_delay, rejected)
    if #lat > 0 then out("latency per caller: median %.0f us (max_delay_us %g)", placement.median(lat), pol.max_delay_us) end
end

-- Run one ':' command line; G is the prompt's global table.
function M.command(line, G)
    G = G or _G
    local words = {}
    for w in line:gmatch("%S+") do words[#words + 1] = w end
    local cmd = (words[1] or ":"):sub(2)
    local args = { select(2, unpack(words)) }
    local ok, err = pcall(function()
        if cmd == "help" or cmd == "h" or cmd == "?" or cmd == "" then
            out("commands (plain Lua works too; `wisp`, `model`, `session`, `pipeline` are globals):")
            for _, h in ipairs(help) do out("  %-30s %s", h[1], h[2]) end
        elseif cmd == "devices" then devices(G)
        elseif cmd == "model" then model_info(G)
        elseif cmd == "load" then
            if not args[1] then out("usage: :load PATH"); return end
            local m, lerr = wisp.load(args[1])
            if not m then out("%s", lerr); return end
            G.model, G.session = m, assert(m:session("auto"))
            G.pipeline = assert(wisp.pipeline { session = G.session, placement = G.session:device() })
            out("loaded %s: %d features (%s)", args[1], m:num_features(), m:dtype())
        elseif cmd == "placement" then
            local a = args[1]
            if a == nil then show_placement(G); return end
            if not need_model(G) then return end
            if a == "calibrate" then
                out("calibrating on %s ...", concat((placement.usable_devices(G.model.engine)), ", "))
                local pol, cerr = wisp.calibrate(G.model, { quick = args[2] == "quick" or nil })
                if not pol then out("%s", cerr); return end
                G.policy = pol
                G.pipeline:set_placement { score = pol }
                out("%s", pol:describe())
                out("placement: calibrated (from the next batch)")
            elseif a == "save" then
                if not G.policy then out("no calibrated policy yet (:placement calibrate)"); return end
                local sok, serr = G.policy:save(args[2] or "policy.json")
                out(sok and ("saved " .. (args[2] or "policy.json")) or serr)
            elseif a == "load" then
                local pol, lerr = placement.load(args[2] or "policy.json")
                if not pol then out("%s", lerr); return end
                G.policy = pol
                G.pipeline:set_placement { score = pol }
                out("%s", pol:describe())
            elseif a == "live" then
                show_live(G)
            elseif a == "autocal" then
                local pol, aerr = placement.auto_policy(G.session)
                if not pol then out("%s", aerr); return end
                out("%s", pol:describe())
                out("(rows of 39 features, the CPU's pool against the GPUs: the crossover the auto device routes by)")
            elseif placement.is_device(a) then
                G.pipeline:set_placement { score = a }
                local sok, serr = G.session:set_device(a)
                if not sok then out("%s", serr); return end
                G.pipeline.current = a
                out("placement: score on %s", a)
            else
                out("unknown placement '%s' (cpu, gpu, gpu:N, gpus, auto, calibrate, save FILE, load FILE, live, "
                    .. "autocal)", a)
            end
        elseif cmd == "batcher" then
            if #args == 0 then show_batching(G)
            elseif args[1] == "run" then batcher_run(G, args[2])
            else set_batching(G, args) end
        elseif cmd == "bench" then run_bench(G, args[1], args[2])
        elseif cmd == "trace" then
            if not args[1] then out("usage: :trace FILE [ROWS] [CALLS]"); return end
            run_bench(G, args[2], args[3], args[1])
        elseif cmd == "stats" then
            if not need_model(G) then return end
            if args[1] == "reset" then G.session:reset_stats(); out("statistics reset"); return end
            out("%s", profile.stage_table(G.session:stats(), "session statistics (since the last reset):"))
        else
            out("unknown command ':%s' (:help lists them)", cmd)
        end
    end)
    if not ok then out("error: %s", tostring(err)) end
    io.stdout:flush()
end

-- Called once by the REPL after its prelude: the pipeline over the preloaded session.
function M.setup(G)
    G = G or _G
    if G.session and not G.pipeline then
        G.pipeline = assert(wisp.pipeline { session = G.session, placement = G.session:device() })
    end
    batching(G)
end

return M
