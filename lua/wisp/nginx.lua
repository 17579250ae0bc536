-- nginx.lua — the wisp.nginx package: wisp inside OpenResty/nginx (per-worker models with hot
-- reload, v1 and v2 predictions, batching, metrics). This file is the package's entry point and
-- holds no logic: the modules in lua/wisp/nginx/ each own one job, and this table gathers what
-- nginx.conf calls.
--
--   lua_shared_dict wisp 4m;                                   -- metrics and reload generations, all workers
--   thread_pool wisp threads=2;          -- for mode = "thread" or "auto" (the default on a GPU)
--   init_by_lua_block { require("wisp.nginx").configure { models = "ctr=/srv/ctr.wisp", device = "auto" } }
--       (or model_repository = "/srv/models": MODELS/name/N/model.wisp, version_policy = "latest:1")
--   init_worker_by_lua_block { require("wisp.nginx").init_worker() }
--   location / { content_by_lua_block { require("wisp.nginx").handle() } }
--
-- How to run the service and its contract (every endpoint, format, status and reload rule):
-- examples/openresty/README.md.
--
-- The modules (each opens with what it owns). A protocol is decode -> run -> encode:
--   state.lua         what the modules share in one worker: configuration, slots, engine, libraries
--   config.lua        the options, their defaults, configure{}
--   file.lua          a model file's identity (wisp_file_id_read, header checksum, the inode pin), directories
--   models.lua        entries (one loaded version of a file, warmed up), hot reload, the versions
--                     a model serves (the model repository, its policy), resolve and the
--                     repository extension's logic
--   http.lua          the body read in place, answers sent (errors as JSON)
--   json.lua          what a decoded JSON value is, probabilities as %.9g (put_num), UTF-8 cleaning
--   metrics.lua       counters, histograms, the shared dict, the Prometheus text
--   run.lua           a decoded request run in the configured mode (thread pool, batcher, async,
--                     inline), the batch pool, the bad rows every answer lists, the request's metrics
--   thread.lua        the thread pool's VM (mode thread): decode -> run -> encode there
--   worker.lua        init_worker: engine, models, mode, timers
--   routes.lua        /healthz, /readyz, /metrics, the admin rule; /v1 and /v2 to their folders
--   v1/routes.lua     v1's endpoints (TensorFlow Serving's REST shape) and model metadata
--   v1/predict.lua    :predict, and v1 as a protocol of run.lua
--   v1/decode.lua     a body (libsvm, JSON lines, {"instances"}) into rows, with its bad rows
--   v1/instances.lua  the {"instances"} scanner that hands a columns model's JSON to the C parser
--   v1/encode.lua     v1's answer: predictions, bad_rows (and its alias errors)
--   v2/routes.lua     v2's endpoints (the Open Inference Protocol), metadata, repository extension
--   v2/infer.lua      infer, and v2 as a protocol of run.lua
--   v2/decode.lua     an infer request's JSON and tensors checked, made rows through v2/rows.lua
--   v2/data.lua       JSON tensors' "data" read in place into typed buffers
--   v2/binary.lua     the binary tensor data extension (inputs in place, binary outputs)
--   v2/rows.lua       tensors into rows: CSR through wisp_batch_from_csr, column inputs into a raw batch
--   v2/encode.lua     v2's answer: the outputs probability and bad_rows, JSON or binary

local config = require "wisp.nginx.config"
local worker = require "wisp.nginx.worker"
local routes = require "wisp.nginx.routes"
local metrics = require "wisp.nginx.metrics"
local file = require "wisp.nginx.file"
local json = require "wisp.nginx.json"
local instances = require "wisp.nginx.v1.instances"
local S = require "wisp.nginx.state"

local M = { _VERSION = "0.1" }

M.configure = config.configure          -- init_by_lua: records options only
M.init_worker = worker.init_worker      -- init_worker_by_lua
M.handle = routes.handle                -- content_by_lua: the whole service; handle(true) on the admin listener
M.too_large = routes.too_large          -- error_page 413 target
M.flush = metrics.flush
M.metrics_text = metrics.metrics_text
M.file_stamp = file.file_stamp

-- For tests: the state of this worker, and the pieces the specs check without nginx.
function M._state() return { cfg = S.cfg, models = S.models, engine = S.engine } end
M._format_values = json.float_items
M._utf8_clean = json.utf8_clean
M._instances_as_lines = function(body)   -- the lines, the element count, extra keys
    S.load_libs()
    local ptr, n, nobj, extra = instances.instances_as_lines(body)
    if not ptr then return nil end
    return require("ffi").string(ptr, n), nobj, extra
end

return M
