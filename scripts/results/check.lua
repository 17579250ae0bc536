-- check.lua — holds every scripts/results/*.json to the one schema (scripts/results/SCHEMA.md; the
-- rules live in scripts/lib/record.lua's check()): one "ok"/"not ok" line a file, then
-- "results schema: N passed, N failed". make test runs it (spec/run.sh).
--   luajit scripts/results/check.lua [FILE...]      (default: every scripts/results/*.json)
local dir = (arg[0]:match("^(.*)/[^/]*$") or ".")
local R = dofile(dir .. "/../lib/record.lua")
local files = {}
for i = 1, #arg do files[#files + 1] = arg[i] end
if #files == 0 then
    local p = assert(io.popen("ls " .. dir .. "/*.json 2>/dev/null"))
    for line in p:lines() do files[#files + 1] = line end
    p:close()
end
local passed, failed = 0, 0
for _, path in ipairs(files) do
    local doc, err = R.read_json(path)
    local bad = doc and R.check(doc) or { err }
    if #bad == 0 then
        passed = passed + 1; print("ok " .. path)
    else
        failed = failed + 1; print("not ok " .. path .. ": " .. table.concat(bad, "; "))
    end
end
if #files == 0 then failed = 1; print("not ok: no JSON under " .. dir) end
print(string.format("results schema: %d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
