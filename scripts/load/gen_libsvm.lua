-- gen_libsvm.lua — write Criteo-like synthetic libsvm rows (13 numeric + 26 Zipf categorical ids).
-- usage: luajit scripts/load/gen_libsvm.lua [--rows N] [--buckets B] [--zipf S] [--seed N] [--one-based] OUT
--   (or: build/wisp run scripts/load/gen_libsvm.lua ...)
local root = (arg and arg[0] or ""):match("^(.*)/scripts/[^/]*$") or "."
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
local synth = require "wisp.synth"

local opts = { rows = 200000, buckets = 65536, zipf = 1.05, seed = 42, one_based = false }
local out
local i = 1
while i <= #arg do
  local a = arg[i]
  if a == "--rows" then opts.rows = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--buckets" then opts.buckets = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--zipf" then opts.zipf = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--seed" then opts.seed = tonumber(arg[i + 1]); i = i + 1
  elseif a == "--one-based" then opts.one_based = true
  elseif a == "-h" or a == "--help" then
    print("usage: gen_libsvm.lua [--rows N] [--buckets B] [--zipf S] [--seed N] [--one-based] OUT"); os.exit(0)
  elseif a:sub(1, 1) == "-" then io.stderr:write("gen_libsvm: unknown option ", a, "\n"); os.exit(2)
  else out = a end
  i = i + 1
end
if not out or not opts.rows or not opts.buckets then
  io.stderr:write("usage: gen_libsvm.lua [--rows N] [--buckets B] [--zipf S] [--seed N] [--one-based] OUT\n")
  os.exit(2)
end
local g = synth.criteo { buckets = opts.buckets, zipf_s = opts.zipf, seed = opts.seed }
local w, bias = g:true_model(opts.seed + 1000)
g:write_libsvm(out, opts.rows, w, bias, { one_based = opts.one_based, progress = true })
