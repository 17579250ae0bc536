-- helpers.lua — shared spec helpers: temporary files, random inputs (uniform and Zipf ids), fp16/int8 rounding and float64 reference scores.
local ffi = require "ffi"

local H = {}

-- one seed per run (kept in the registry, which busted's per-file
-- insulation leaves alone), printed once so a failure can be replayed
-- with WISP_SEED=<seed>; every spec file starts from it
local reg = debug.getregistry()
if not reg.wisp_spec_seed then
    reg.wisp_spec_seed = tonumber(os.getenv("WISP_SEED")) or (os.time() + math.floor(os.clock() * 1e6))
    io.stderr:write("lua specs: WISP_SEED=", reg.wisp_spec_seed, "\n")
end
H.seed = reg.wisp_spec_seed
math.randomseed(H.seed)

local random, floor, abs, exp = math.random, math.floor, math.abs, math.exp

---------------------------------------------------------------------------
-- temporary files
---------------------------------------------------------------------------

local tmpfiles = {}

-- A fresh temporary path (os.tmpname), removed by H.cleanup().
function H.tmpname(suffix)
    local p = os.tmpname()
    tmpfiles[#tmpfiles + 1] = p
    if suffix then
        os.remove(p)
        p = p .. suffix
        tmpfiles[#tmpfiles + 1] = p
    end
    return p
end

function H.cleanup()
    for i = #tmpfiles, 1, -1 do
        os.remove(tmpfiles[i])
        tmpfiles[i] = nil
    end
end

function H.read_file(path)
    local f = assert(io.open(path, "rb"))
    local s = f:read("*a")
    f:close()
    return s
end

function H.write_file(path, data)
    local f = assert(io.open(path, "wb"))
    f:write(data)
    f:close()
end

-- Run a shell command: its stdout and stderr together, and its exit status.
function H.sh(cmd)
    local f = assert(io.popen("(" .. cmd .. ") 2>&1; echo \"__rc=$?\""))
    local out = f:read("*a")
    f:close()
    local rc = tonumber(out:match("__rc=(%d+)%s*$"))
    return (out:gsub("__rc=%d+%s*$", "")), rc
end

-- The non-empty lines of s.
function H.lines(s)
    local t = {}
    for l in s:gmatch("[^\n]+") do t[#t + 1] = l end
    return t
end

function H.file_exists(path)
    local f = io.open(path, "rb")
    if f then f:close() return true end
    return false
end

---------------------------------------------------------------------------
-- numbers
---------------------------------------------------------------------------

local f32box = ffi.new("float[1]")

-- x rounded to float32.
function H.f32(x)
    f32box[0] = x
    return f32box[0]
end

-- round half to even
local function rint(y)
    local r = floor(y + 0.5)
    if r - y == 0.5 and r % 2 ~= 0 then r = r - 1 end
    return r
end
H.rint = rint

-- A float32 value rounded to fp16 (nearest, ties to even) and back.
function H.f16(x)
    if x ~= x or x == 0 then return x end
    local ax = abs(x)
    if ax >= 65520 then return x > 0 and math.huge or -math.huge end
    local _, e = math.frexp(ax)        -- ax = m * 2^e, 0.5 <= m < 1
    local step = 2 ^ (e - 11)          -- 10 mantissa bits below the leading one
    if e - 1 < -14 then step = 2 ^ -24 end   -- subnormal
    local q = rint(ax / step) * step
    return x > 0 and q or -q
end

-- The int8 quantization of wisp.h: scale = max|w| / 127, q = round(w / scale);
-- returns the scale and a function giving each dequantized weight (double).
function H.i8_quantize(w, n)
    local m = 0
    for i = 0, n - 1 do m = math.max(m, abs(w[i])) end
    local scale = H.f32(m / 127)
    local q = {}
    for i = 0, n - 1 do
        q[i] = scale > 0 and rint(w[i] / scale) or 0
    end
    return scale, q
end

-- Weights as stored by dtype, as a 0-based Lua table of doubles.
function H.stored_weights(w, n, dtype)
    local out = {}
    if dtype == "f32" then
        for i = 0, n - 1 do out[i] = H.f32(w[i]) end
    elseif dtype == "f16" then
        for i = 0, n - 1 do out[i] = H.f16(H.f32(w[i])) end
    elseif dtype == "i8" then
        local scale, q = H.i8_quantize(w, n)
        for i = 0, n - 1 do out[i] = scale * q[i] end
        out.scale = scale
    else
        error("dtype " .. tostring(dtype))
    end
    return out
end

---------------------------------------------------------------------------
-- random inputs
---------------------------------------------------------------------------

-- Normal(0, sd) by Box-Muller.
function H.normal(sd)
    local u1, u2 = random(), random()
    if u1 < 1e-300 then u1 = 1e-300 end
    return (sd or 1) * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)
end

-- n random weights as a 0-based Lua table (float32 values).
function H.random_weights(n, sd)
    local w = {}
    for i = 0, n - 1 do w[i] = H.f32(H.normal(sd or 0.5)) end
    return w
end

-- 1-based copy of a 0-based table (for wisp.write_model).
function H.one_based(w, n)
    local t = {}
    for i = 0, n - 1 do t[i + 1] = w[i] end
    return t
end

-- An id sampler over [0, n): "uniform" or "zipf" (exponent 1.1, id 0 hottest).
function H.sampler(kind, n)
    if kind == "uniform" then
        return function() return random(0, n - 1) end
    end
    local cdf, total = {}, 0
    for k = 1, n do
        total = total + 1 / k ^ 1.1
        cdf[k] = total
    end
    return function()
        local u = random() * total
        local lo, hi = 1, n
        while lo < hi do
            local mid = floor((lo + hi) / 2)
            if cdf[mid] < u then lo = mid + 1 else hi = mid end
        end
        return lo - 1
    end
end

-- Random rows for a model of nf features: a list of {ids=, vals=} (vals nil
-- for binary rows) or {ids=, vals=, bids=} (mixed). Includes empty rows,
-- duplicate ids, ids out of range (>= nf, and some >= 2^32).
-- opts: kind ("uniform"/"zipf"), rows, max_len, values ("binary", "valued",
-- "mixed", "any"), out_of_range (true/false), huge (ids >= 2^32, default true).
function H.random_rows(nf, opts)
    opts = opts or {}
    local sample = H.sampler(opts.kind or "uniform", nf)
    local rows = {}
    local nrows = opts.rows or 100
    local max_len = opts.max_len or 40
    local values = opts.values or "any"
    local oor = opts.out_of_range ~= false
    local huge = opts.huge ~= false
    local function one_id()
        local u = random()
        if oor and u < 0.03 then return nf + random(0, 50) end
        if oor and huge and u < 0.04 then return 2 ^ 32 + random(0, 1000) end
        return sample()
    end
    for r = 1, nrows do
        local len = random(0, max_len)
        if random() < 0.1 then len = 0 end
        local ids = {}
        for k = 1, len do
            if k > 1 and random() < 0.1 then
                ids[k] = ids[random(1, k - 1)]   -- a duplicate id
            else
                ids[k] = one_id()
            end
        end
        local mode = values
        if mode == "any" then
            local u = random()
            mode = u < 0.34 and "binary" or u < 0.67 and "valued" or "mixed"
        end
        local row = { ids = ids }
        if mode == "valued" or mode == "mixed" then
            local vals = {}
            for k = 1, len do vals[k] = H.f32(H.normal(1.5)) end
            row.vals = vals
        end
        if mode == "mixed" then
            local nb = random(0, 8)
            local bids = {}
            for k = 1, nb do bids[k] = one_id() end
            row.bids = bids
        end
        rows[r] = row
    end
    return rows
end

-- Add rows made by random_rows to a batch.
function H.add_rows(batch, rows)
    for _, row in ipairs(rows) do
        if row.bids then
            assert(batch:add_mixed(row.ids, row.vals, row.bids))
        else
            assert(batch:add(row.ids, row.vals))
        end
    end
end

-- The same rows as libsvm text (a label first, binary features as bare ids).
function H.libsvm_text(rows)
    local lines = {}
    for r, row in ipairs(rows) do
        local parts = { (r % 2 == 0) and "1" or "-1" }
        for k, id in ipairs(row.ids) do
            if row.vals then
                parts[#parts + 1] = string.format("%d:%.9g", id, row.vals[k])
            else
                parts[#parts + 1] = string.format("%d", id)
            end
        end
        for _, id in ipairs(row.bids or {}) do parts[#parts + 1] = string.format("%d", id) end
        lines[r] = table.concat(parts, " ")
    end
    return table.concat(lines, "\n") .. "\n"
end

---------------------------------------------------------------------------
-- reference scoring, in float64
---------------------------------------------------------------------------

local function sigmoid(z) return 1 / (1 + exp(-z)) end
H.sigmoid = sigmoid

-- Probability and out-of-range count of one row; ws: 0-based stored weights.
function H.ref_row(ws, nf, bias, row)
    local z, oor = bias, 0
    local ids, vals = row.ids, row.vals
    for k = 1, #ids do
        local id = ids[k]
        if id < nf then
            z = z + ws[id] * (vals and vals[k] or 1)
        else
            oor = oor + 1
        end
    end
    for _, id in ipairs(row.bids or {}) do
        if id < nf then z = z + ws[id] else oor = oor + 1 end
    end
    return sigmoid(z), oor
end

-- Reference probabilities (1-based table), total out-of-range ids, total nnz.
function H.ref_scores(ws, nf, bias, rows)
    local p, oor, nnz = {}, 0, 0
    for r, row in ipairs(rows) do
        local pr, o = H.ref_row(ws, nf, bias, row)
        p[r] = pr
        oor = oor + o
        nnz = nnz + #row.ids + #(row.bids or {})
    end
    return p, oor, nnz
end

-- Assert |got[i] - want[i]| <= tol for every row (got: FFI array, 0-based,
-- or a Lua table, 1-based when one_based); NaN must match NaN.
function H.assert_scores(got, want, n, tol, one_based, what)
    local off = one_based and 0 or 1
    local worst, worst_i = 0, nil
    for i = 1, n do
        local g, w = got[i - off], want[i]
        if w ~= w then
            if g == g then
                error(string.format("%s: row %d: want NaN, got %.9g (WISP_SEED=%d)", what or "scores", i - 1, g, H.seed), 2)
            end
        else
            local d = abs(g - w)
            if not (d <= tol) then
                error(string.format("%s: row %d: got %.9g, want %.9g (diff %.3g > %.3g, WISP_SEED=%d)",
                    what or "scores", i - 1, g, w, d, tol, H.seed), 2)
            end
            if d > worst then worst, worst_i = d, i end
        end
    end
    return worst, worst_i
end

-- Write a random model; returns path, 0-based float32 weights, bias.
function H.random_model(wisp, nf, opts)
    opts = opts or {}
    local w = H.random_weights(nf, opts.sd)
    local bias = opts.bias or H.normal(0.5)
    local path = H.tmpname(".wisp")
    assert(wisp.write_model(path, H.one_based(w, nf), { bias = bias, dtype = opts.dtype or "f32",
                                                       meta = opts.meta, columns = opts.columns }))
    return path, w, bias
end

-- Run `code` in a fresh luajit process from the repository root; returns
-- its stdout+stderr and whether it exited 0.
function H.luajit(code, env)
    local tmp = H.tmpname(".lua")
    H.write_file(tmp, code)
    local cmd = string.format("%s luajit %s 2>&1; echo \"rc=$?\"", env or "", tmp)
    local p = assert(io.popen(cmd))
    local out = p:read("*a")
    p:close()
    local rc = tonumber(out:match("rc=(%d+)%s*$"))
    return out:gsub("rc=%d+%s*$", ""), rc == 0
end

return H
