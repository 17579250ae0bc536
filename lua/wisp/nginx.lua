-- nginx.lua — the wisp.nginx package: wisp inside OpenResty/nginx (per-worker models with hot
-- reload, predict requests in JSON rows, JSON lines or libsvm, batching, metrics). This file
-- is the package's entry point and holds no logic: the modules in lua/wisp/nginx/ each own
-- one job, and this table gathers what nginx.conf calls.
--
--   lua_shared_dict wisp 4m;                                   -- metrics and reload generations, all workers
--   thread_pool wisp threads=2;          -- for mode = "thread" or "auto" (the default on a GPU)
--   init_by_lua_block { require("wisp.nginx").configure { models = "ctr=/srv/ctr.wisp", device = "auto" } }
--       (or model_repository = "/srv/models": MODELS/name/N/model.wisp, version_policy = "latest:1")
--   init_worker_by_lua_block { require("wisp.nginx").init_worker() }
--   location / { content_by_lua_block { require("wisp.nginx").handle() } }
--
-- How to run the service and its contract (every endpoint, format, status and reload rule):
-- examples/openresty/README.md. The measured modes and their history:
-- scripts/results/nginx-diary.md.
--
-- The modules (each opens with what it owns):
--   state.lua      what the modules share in one worker: configuration, slots, engine, libraries
--   config.lua     the options, their defaults, configure{}
--   file.lua       a model file's identity (stat, header checksum, the inode pin)
--   models.lua     entries (one loaded version of a file, warmed up), hot reload, the versions
--                  a model serves (the model repository, its policy), resolve and the
--                  repository extension's logic
--   http.lua       the body read in place, Content-Type -> body kind, answers sent
--   instances.lua  the {"instances"} scanner that hands a columns model's JSON to the C parser
--   request.lua    a body parsed into a batch or raw batch, one path per format; bad rows
--   answer.lua     the answer's JSON (put_num), UTF-8 cleaning
--   metrics.lua    counters, histograms, the shared dict, the Prometheus text
--   predict.lua    :predict in each mode (inline, async, thread, auto; the batcher)
--   score.lua      the one scoring route of the worker and the thread VM (score_raw, bad rows)
--   thread.lua     the thread pool's VM (mode thread)
--   worker.lua     init_worker: engine, models, mode, timers
--   routes.lua     the endpoints and their metadata answers
--   v2.lua         the Open Inference Protocol (KServe v2) routes and answers
--   tensor.lua     v2 tensors (JSON and the binary extension) decoded and checked

local config = require "wisp.nginx.config"
local worker = require "wisp.nginx.worker"
local routes = require "wisp.nginx.routes"
local metrics = require "wisp.nginx.metrics"
local file = require "wisp.nginx.file"
local thread = require "wisp.nginx.thread"
local answer = require "wisp.nginx.answer"
local instances = require "wisp.nginx.instances"
local S = require "wisp.nginx.state"

local M = { _VERSION = "0.1" }

M.configure = config.configure          -- init_by_lua: records options only
M.init_worker = worker.init_worker      -- init_worker_by_lua
M.handle = routes.handle                -- content_by_lua: the whole service; handle(true) on the admin listener
M.too_large = routes.too_large          -- error_page 413 target
M.flush = metrics.flush
M.metrics_text = metrics.metrics_text
M.file_stamp = file.file_stamp
M.thread_predict = thread.predict       -- the thread pool's entry under its former name

-- For tests: the state of this worker, and the pieces the specs check without nginx.
function M._state() return { cfg = S.cfg, models = S.models, engine = S.engine } end
M._format_values = answer.format_values
M._utf8_clean = answer.utf8_clean
M._instances_as_lines = function(body)   -- the lines, the element count, extra keys
    S.load_libs()
    local ptr, n, nobj, extra = instances.instances_as_lines(body)
    if not ptr then return nil end
    return require("ffi").string(ptr, n), nobj, extra
end

return M
