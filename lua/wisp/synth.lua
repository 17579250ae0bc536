-- synth.lua — deterministic Criteo-like synthetic data: 13 numeric + 26 hashed categorical features, Zipf ids.
--
-- Layout of the feature-id space (0-based, as wisp scores it):
--   ids 0..12                 the 13 numeric columns, value log1p(x) / 4
--   13 + c*B .. 13 + (c+1)*B  categorical column c (0..25), B = buckets per column,
--                             ids drawn from a Zipf(s) law, the hot ids scattered
--                             by a per-column odd multiplier (B is a power of two)
-- A hidden "true" model (weights ~ N(0, 0.3^2), bias -1) labels the rows, so a
-- model trained on them (LIBLINEAR, ...) learns real structure.
-- Pure LuaJIT (ffi only for arrays): usable with or without the C library.
local ffi = require "ffi"
local bit = require "bit"

local floor, log, exp, sqrt, cos, pi = math.floor, math.log, math.exp, math.sqrt, math.cos, math.pi
local band, bxor, rshift, lshift, tobit = bit.band, bit.bxor, bit.rshift, bit.lshift, bit.tobit

local M = {}
M.NUMERIC, M.CATEGORICAL = 13, 26

-- xorshift128+ on two 32-bit halves would be fiddly; a 64-bit xorshift* in uint64 cdata is slow
-- in LuaJIT, so use a 53-bit-safe LCG pair (Park–Miller style) combined: fast, deterministic.
local Rng = {}
Rng.__index = Rng
function M.rng(seed)
  seed = floor(tonumber(seed) or 1)
  local self = setmetatable({ a = (seed % 2147483646) + 1, b = ((seed * 7919) % 2147483398) + 1 }, Rng)
  for _ = 1, 8 do self:next() end
  return self
end
-- uniform in [0, 1)
function Rng:next()
  -- L'Ecuyer's combined MRG-free variant: two Lehmer generators, difference mod m1
  local a = (self.a * 40014) % 2147483563
  local b = (self.b * 40692) % 2147483399
  self.a, self.b = a, b
  local z = a - b
  if z < 1 then z = z + 2147483562 end
  return (z - 1) / 2147483562
end
function Rng:int(n) return floor(self:next() * n) end
function Rng:normal()
  local u1, u2 = self:next(), self:next()
  if u1 < 1e-300 then u1 = 1e-300 end
  return sqrt(-2 * log(u1)) * cos(2 * pi * u2)
end

-- Zipf(s) over 0..n-1 by inverse CDF (binary search in a float64 table).
local Zipf = {}
Zipf.__index = Zipf
function M.zipf(n, s)
  local cdf = ffi.new("double[?]", n)
  local acc = 0
  for k = 1, n do acc = acc + k ^ -s; cdf[k - 1] = acc end
  for k = 0, n - 1 do cdf[k] = cdf[k] / acc end
  return setmetatable({ n = n, cdf = cdf }, Zipf)
end
function Zipf:sample(u)
  local cdf, lo, hi = self.cdf, 0, self.n - 1
  while lo < hi do
    local mid = rshift(lo + hi, 1)
    if cdf[mid] < u then lo = mid + 1 else hi = mid end
  end
  return lo
end

--- A generator of rows. opts: buckets (per categorical column, power of two,
--- default 2^16), zipf_s (default 1.05; 0 = uniform ids), seed (default 42).
function M.criteo(opts)
  opts = opts or {}
  local B = opts.buckets or 65536
  assert(B >= 2 and band(B, B - 1) == 0, "buckets must be a power of two")
  local g = {
    buckets = B,
    num_features = M.NUMERIC + M.CATEGORICAL * B,
    rng = M.rng(opts.seed or 42),
    zipf = (opts.zipf_s or 1.05) > 0 and M.zipf(B, opts.zipf_s or 1.05) or nil,
    mult = {},
  }
  for c = 0, M.CATEGORICAL - 1 do g.mult[c] = 2 * (g.rng:int(B / 2)) + 1 end  -- odd: a bijection mod B
  return setmetatable(g, { __index = M })
end

--- Fill ids (0-based Lua array 1..39) and vals (13 numeric values) for one row.
function M:row(ids, vals)
  local rng, B = self.rng, self.buckets
  for j = 1, M.NUMERIC do
    -- integer counts with a heavy tail, as in Criteo's I1..I13
    local x = floor(exp(rng:next() * 8) - 1)
    ids[j] = j - 1
    vals[j] = log(1 + x) / 4
  end
  for c = 0, M.CATEGORICAL - 1 do
    local r = self.zipf and self.zipf:sample(rng:next()) or rng:int(B)
    local h = (r * self.mult[c]) % B
    ids[M.NUMERIC + c + 1] = M.NUMERIC + c * B + h
  end
  return M.NUMERIC + M.CATEGORICAL
end

--- The hidden true model: weights (an FFI float array of num_features) and bias.
function M:true_model(seed)
  local rng = M.rng(seed or 7)
  local n = self.num_features
  local w = ffi.new("float[?]", n)
  for i = 0, n - 1 do w[i] = rng:normal() * 0.3 end
  return w, -1.0
end

--- Write `rows` rows as libsvm text to path. opts.one_based adds 1 to every id
--- (LIBLINEAR's numbering). Labels are drawn from the true model (+1 / -1).
function M:write_libsvm(path, rows, w, bias, opts)
  opts = opts or {}
  local f = assert(io.open(path, "wb"))
  local base = opts.one_based and 1 or 0
  local ids, vals, parts = {}, {}, {}
  local fmt = string.format
  local rng = self.rng
  for r = 1, rows do
    local n = self:row(ids, vals)
    local z = bias
    for j = 1, M.NUMERIC do z = z + w[ids[j]] * vals[j] end
    for j = M.NUMERIC + 1, n do z = z + w[ids[j]] end
    local p = 1 / (1 + exp(-z))
    parts[1] = rng:next() < p and "1" or "-1"
    -- LIBLINEAR wants increasing indices in a line: numeric ids come first and
    -- categorical columns occupy increasing id ranges, so the row is sorted already
    for j = 1, M.NUMERIC do parts[j + 1] = fmt("%d:%.6g", ids[j] + base, vals[j]) end
    for j = M.NUMERIC + 1, n do parts[j + 1] = (ids[j] + base) .. ":1" end
    parts[n + 2] = nil
    f:write(table.concat(parts, " ", 1, n + 1), "\n")
    if opts.progress and r % 50000 == 0 then io.stderr:write(fmt("\r  %s: %d/%d rows", path, r, rows)) end
  end
  if opts.progress then io.stderr:write(fmt("\r  %s: %d rows written\n", path, rows)) end
  f:close()
end

return M
