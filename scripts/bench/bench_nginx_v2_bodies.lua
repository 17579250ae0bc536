-- bench_nginx_v2_bodies.lua — the request bodies of scripts/bench/bench_nginx_v2.sh, from one libsvm file:
--   wisp run scripts/bench/bench_nginx_v2_bodies.lua ROWS.libsvm OUTDIR
-- OUTDIR/v1.json      {"instances": [{"ids": [...], "vals": [...]}, ...]}  (v1 JSON, the same rows)
-- OUTDIR/v2.json      a v2 inference request of JSON tensors: indptr INT64, indices INT32, values FP32
-- OUTDIR/v2.bin       the same tensors in the binary tensor data extension (little-endian buffers after
--                     the JSON header), outputs asked binary (binary_data_output, as tritonclient asks)
-- OUTDIR/v2.bin.hlen  the header's length (the Inference-Header-Content-Length value)
local ffi = require "ffi"
local src, dir = assert(arg[1], "usage: ROWS.libsvm OUTDIR"), assert(arg[2], "usage: ROWS.libsvm OUTDIR")
local indptr, indices, values, inst = { 0 }, {}, {}, {}
for line in io.lines(src) do
    local ids, vals = {}, {}
    for id, v in line:gmatch("(%d+):(%S+)") do
        ids[#ids + 1] = id; vals[#vals + 1] = v
        indices[#indices + 1] = id; values[#values + 1] = v
    end
    indptr[#indptr + 1] = #indices
    inst[#inst + 1] = '{"ids":[' .. table.concat(ids, ",") .. '],"vals":[' .. table.concat(vals, ",") .. ']}'
end
local function write(name, s) local f = assert(io.open(dir .. "/" .. name, "wb")); f:write(s); f:close() end
write("v1.json", '{"instances":[' .. table.concat(inst, ",") .. ']}\n')
local n1, nnz = #indptr, #indices
write("v2.json", string.format('{"inputs":[{"name":"indptr","datatype":"INT64","shape":[%d],"data":[%s]},'
    .. '{"name":"indices","datatype":"INT32","shape":[%d],"data":[%s]},'
    .. '{"name":"values","datatype":"FP32","shape":[%d],"data":[%s]}]}\n',
    n1, table.concat(indptr, ","), nnz, table.concat(indices, ","), nnz, table.concat(values, ",")))
local head = string.format('{"inputs":[{"name":"indptr","datatype":"INT64","shape":[%d],"parameters":{"binary_data_size":%d}},'
    .. '{"name":"indices","datatype":"INT32","shape":[%d],"parameters":{"binary_data_size":%d}},'
    .. '{"name":"values","datatype":"FP32","shape":[%d],"parameters":{"binary_data_size":%d}}],'
    .. '"parameters":{"binary_data_output":true}}', n1, 8 * n1, nnz, 4 * nnz, nnz, 4 * nnz)
local a = ffi.new("int64_t[?]", n1)
for i = 1, n1 do a[i - 1] = indptr[i] end
local b = ffi.new("int32_t[?]", nnz)
local c = ffi.new("float[?]", nnz)
for i = 1, nnz do b[i - 1] = tonumber(indices[i]); c[i - 1] = tonumber(values[i]) end
write("v2.bin", head .. ffi.string(a, 8 * n1) .. ffi.string(b, 4 * nnz) .. ffi.string(c, 4 * nnz))
write("v2.bin.hlen", tostring(#head) .. "\n")
io.stderr:write(string.format("bench_nginx_v2_bodies.lua: %d rows, %d features -> %s/{v1.json,v2.json,v2.bin}\n", n1 - 1, nnz, dir))
