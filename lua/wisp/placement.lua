-- placement.lua — wisp.placement: where each stage runs (a device, a function, a policy), per batch.
--
-- Each stage (transform, score) runs on a device, on what a Lua function of the batch returns,
-- or where a calibrated policy (wisp.calibrate) puts the batch, applied per batch by a pipeline.
--
--   local policy = wisp.calibrate(model)              -- measures this machine, finds the crossover
--   policy:save("policy.json")                        -- or "policy.lua" (a Lua table literal)
--   local pipe = wisp.pipeline{ model = model, placement = policy }
--   pipe:score(batch)                                 -- the device is chosen for this batch
--   pipe:live()                                       -- where the breaks are after the live re-check
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
--
-- The modules, one job each:
--   placement_policy.lua     policies: measured points -> breaks by the core's choice rule
--                            (engine/score/autoplace.c owns the CPU/GPU crossover: the rule is
--                            stated there), check, save, load, describe
--   placement_calibrate.lua  wisp.calibrate (timing the caller's sessions over a sweep of sizes)
--                            and auto_policy (the "auto" device's own calibration as a policy)
--   placement_live.lua       a pipeline's live re-check of its policy next to each break
--   placement_pipeline.lua   wisp.pipeline: the device per batch, sessions moved on change
-- wisp.placement has every public name of the policy, calibrate and pipeline modules, and the
-- live one as wisp.placement.live (require "wisp.placement", or wisp.placement: loaded on first use).
local wisp = require "wisp"

local M = {}
for _, name in ipairs { "wisp.placement_policy", "wisp.placement_calibrate", "wisp.placement_pipeline" } do
    for k, v in pairs(require(name)) do
        if k:sub(1, 1) ~= "_" then M[k] = v end
    end
end
M.live = require "wisp.placement_live"                  -- placement.live.new(policy[, opts]): the re-check alone

wisp.placement = M
wisp.calibrate = M.calibrate
wisp.pipeline = M.pipeline
return M
