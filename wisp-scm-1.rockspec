-- wisp-scm-1.rockspec — the Lua layer of wisp for LuaRocks users (the C library comes from `make install`).
rockspec_format = "3.0"
package = "wisp"
version = "scm-1"

source = {
   -- a local checkout: `luarocks make wisp-scm-1.rockspec` from the repository root
   url = "git+file://./",
   branch = "main",
}

description = {
   summary = "Inference engine for sparse wide (logistic-regression) models on CPUs and CUDA GPUs",
   detailed = [[
wisp scores sparse "wide" linear models (hashed categorical features,
bucketized numerics, crosses; trained with TensorFlow's LinearClassifier,
LIBLINEAR or Vowpal Wabbit) from a C core with CUDA kernels. This rock is the
LuaJIT FFI layer: `local wisp = require "wisp"` loads a .wisp model, builds
batches from Lua tables, FFI buffers or libsvm text, and scores them on the CPU
or a GPU. It needs LuaJIT (the FFI) and libwisp, installed by the project's
`make install` (or found through $WISP_LIB).
]],
   license = "MIT",
   labels = { "luajit", "ffi", "machine-learning", "inference", "cuda", "openresty" },
}

dependencies = {
   "lua >= 5.1",   -- LuaJIT 2.1 in practice: the modules use its FFI
}

-- libwisp.so and wisp.h, from `make install PREFIX=...`
external_dependencies = {
   WISP = {
      header = "wisp.h",
      library = "wisp",
   },
}

build = {
   type = "builtin",
   modules = {
      ["wisp"] = "lua/wisp/init.lua",
      ["wisp.cdef"] = "lua/wisp/cdef.lua",
      ["wisp.const"] = "lua/wisp/const.lua",
      ["wisp.base"] = "lua/wisp/base.lua",
      ["wisp.engine"] = "lua/wisp/engine.lua",
      ["wisp.model"] = "lua/wisp/model.lua",
      ["wisp.batch"] = "lua/wisp/batch.lua",
      ["wisp.raw"] = "lua/wisp/raw.lua",
      ["wisp.session"] = "lua/wisp/session.lua",
      ["wisp.vw"] = "lua/wisp/vw.lua",
      ["wisp.synth"] = "lua/wisp/synth.lua",
      ["wisp.columns"] = "lua/wisp/columns.lua",
      ["wisp.placement"] = "lua/wisp/placement.lua",
      ["wisp.placement_policy"] = "lua/wisp/placement_policy.lua",
      ["wisp.placement_calibrate"] = "lua/wisp/placement_calibrate.lua",
      ["wisp.placement_live"] = "lua/wisp/placement_live.lua",
      ["wisp.placement_pipeline"] = "lua/wisp/placement_pipeline.lua",
      ["wisp.batcher"] = "lua/wisp/batcher.lua",
      ["wisp.profile"] = "lua/wisp/profile.lua",
      ["wisp.repl"] = "lua/wisp/repl.lua",
      ["wisp.nginx"] = "lua/wisp/nginx.lua",               -- the service's entry point; its modules:
      ["wisp.nginx.state"] = "lua/wisp/nginx/state.lua",
      ["wisp.nginx.config"] = "lua/wisp/nginx/config.lua",
      ["wisp.nginx.file"] = "lua/wisp/nginx/file.lua",
      ["wisp.nginx.models"] = "lua/wisp/nginx/models.lua",
      ["wisp.nginx.http"] = "lua/wisp/nginx/http.lua",
      ["wisp.nginx.json"] = "lua/wisp/nginx/json.lua",
      ["wisp.nginx.metrics"] = "lua/wisp/nginx/metrics.lua",
      ["wisp.nginx.run"] = "lua/wisp/nginx/run.lua",
      ["wisp.nginx.thread"] = "lua/wisp/nginx/thread.lua",
      ["wisp.nginx.worker"] = "lua/wisp/nginx/worker.lua",
      ["wisp.nginx.routes"] = "lua/wisp/nginx/routes.lua",
      ["wisp.nginx.v1.routes"] = "lua/wisp/nginx/v1/routes.lua",
      ["wisp.nginx.v1.predict"] = "lua/wisp/nginx/v1/predict.lua",
      ["wisp.nginx.v1.decode"] = "lua/wisp/nginx/v1/decode.lua",
      ["wisp.nginx.v1.instances"] = "lua/wisp/nginx/v1/instances.lua",
      ["wisp.nginx.v1.encode"] = "lua/wisp/nginx/v1/encode.lua",
      ["wisp.nginx.v2.routes"] = "lua/wisp/nginx/v2/routes.lua",
      ["wisp.nginx.v2.infer"] = "lua/wisp/nginx/v2/infer.lua",
      ["wisp.nginx.v2.decode"] = "lua/wisp/nginx/v2/decode.lua",
      ["wisp.nginx.v2.data"] = "lua/wisp/nginx/v2/data.lua",
      ["wisp.nginx.v2.binary"] = "lua/wisp/nginx/v2/binary.lua",
      ["wisp.nginx.v2.rows"] = "lua/wisp/nginx/v2/rows.lua",
      ["wisp.nginx.v2.encode"] = "lua/wisp/nginx/v2/encode.lua",
   },
}

test_dependencies = {
   "busted >= 2.0",
}

test = {
   type = "busted",
   flags = { "--lua=luajit", "--lpath=lua/?.lua;lua/?/init.lua;spec/lua/?.lua", "spec/lua" },
}
