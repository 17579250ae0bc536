-- format_check.lua — the service's number formatter (wisp.nginx put_num) against string.format("%.9g"), without nginx.
--   wisp run spec/nginx/format_check.lua   -> "FORMAT ok N" or "FORMAT bad ..." lines
-- Random probabilities (uniform, skewed to tiny values, next to each decade), the edges
-- (0, 1, 1e-4, the float just under 1 and under each decade) and values outside [1e-4, 1)
-- (fallback), NaN and infinities (null). Each item must equal %.9g byte for byte (the
-- formatter rounds x * 10^k in double, which can differ from %.9g only on a decimal tie
-- within one part in 2^53: not met by float32 inputs in practice).
package.path = "lua/?.lua;lua/?/init.lua;" .. package.path
local ffi = require "ffi"
local N = require "wisp.nginx"
local n = 100000
local out = ffi.new("float[?]", n)
local special = { 0, 1, 0.1, 0.01, 0.001, 1e-4, 1e-5, 0.099999994, 0.0999999999, 0.99999994, 0.5, 0.99999e-4,
                  0.00999999977, 0.000099999997, 0.000100000005, 0.123456789, 1 / 0, -1 / 0, 0 / 0, 2, -0.5, 1e-30, 3.4e38 }
for i, v in ipairs(special) do out[i - 1] = v end
math.randomseed(os.time())
for i = #special, n - 1 do
    local r = math.random()
    if i % 3 == 0 then r = r ^ 8 end
    if i % 7 == 0 then r = 10 ^ -math.random(1, 5) * (1 + (math.random() - 0.5) * 1e-6) end
    out[i] = r
end
local bad = { [5] = true }                    -- a row marked bad prints null whatever its value
local text = N._format_values(out, n, bad)
local i, nbad = 0, 0
for item in (text .. ","):gmatch("([^,]*),") do
    local x = out[i]
    local want = (bad[i] or x ~= x or x == 1 / 0 or x == -1 / 0) and "null" or string.format("%.9g", x)
    if item ~= want then
        nbad = nbad + 1
        if nbad <= 5 then print(string.format("FORMAT bad #%d: %s, %%.9g gives %s", i, item, want)) end
    end
    i = i + 1
end
if i ~= n then nbad = nbad + 1; print(string.format("FORMAT bad: %d items for %d values", i, n)) end
if nbad == 0 then print("FORMAT ok " .. n) end
