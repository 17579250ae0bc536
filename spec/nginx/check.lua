-- check.lua — assertions over the service's JSON answers for spec/nginx/run.sh (run with `wisp run`).
--
--   check.lua preds RESP.json CLI.txt [NULLS] [FIRST]  predictions equal the CLI's lines to 1e-6;
--                                                  NULLS: comma-separated 0-based rows that must be
--                                                  null and listed in "errors" (others scored);
--                                                  FIRST: the CLI line of prediction 0 (1-based, default 1)
--   check.lua field RESP.json PATH [VALUE]         the field at PATH (a.b.1.c) exists [and equals VALUE]
--   check.lua differ RESP.json CLI.txt             predictions differ from the CLI's (another model)
--   check.lua has RESP.json PATH TEXT              the field at PATH is a string containing TEXT
--   check.lua count RESP.json PATH N               the field at PATH is a list of N elements
--   check.lua invariant RESP...                    every answer with "predictions": each null has its
--                                                  "errors" entry and each entry's row is null, and
--                                                  "bad_rows" is there exactly when "errors" is, with
--                                                  the same content (files that are not such answers
--                                                  are skipped); prints the number of answers checked
-- Prints nothing and exits 0 on success; prints why and exits 1 otherwise.
local cjson = require "cjson"
local mode, file = arg[1], arg[2]
local function die(...) io.stdout:write(table.concat({ ... }), "\n"); os.exit(1) end
if mode == "invariant" then
    local n = 0
    for i = 2, #arg do
        local fh = io.open(arg[i], "rb")
        local txt = fh and fh:read("*a") or ""
        if fh then fh:close() end
        local okd, d = pcall(cjson.decode, txt)
        if okd and type(d) == "table" and type(d.predictions) == "table" then
            n = n + 1
            if (d.errors == nil) ~= (d.bad_rows == nil) or cjson.encode(d.errors) ~= cjson.encode(d.bad_rows) then
                die(arg[i], ": bad_rows and errors differ: ", cjson.encode(d.bad_rows), " vs ", cjson.encode(d.errors))
            end
            local listed = {}
            for _, e in ipairs(type(d.errors) == "table" and d.errors or {}) do
                if type(e.index) ~= "number" or type(e.error) ~= "string" or e.error == "" then
                    die(arg[i], ": an errors entry without index or message: ", cjson.encode(e))
                end
                if d.predictions[e.index + 1] ~= cjson.null then
                    die(arg[i], ": errors lists row ", e.index, " but its prediction is ",
                        tostring(d.predictions[e.index + 1]))
                end
                listed[e.index] = true
            end
            for k, v in ipairs(d.predictions) do
                if v == cjson.null and not listed[k - 1] then die(arg[i], ": row ", k - 1,
                    " is null with no errors entry") end
            end
        end
    end
    io.stdout:write(n, "\n")
    os.exit(0)
end
local f = io.open(file, "rb")
if not f then die("no such file ", file) end
local text = f:read("*a"); f:close()
local ok, doc = pcall(cjson.decode, text)
if not ok or type(doc) ~= "table" then die("not JSON: ", text:sub(1, 200)) end

local function cli_lines(path)
    local t = {}
    for l in io.lines(path) do t[#t + 1] = tonumber(l) or 0 / 0 end
    return t
end

-- the field at PATH (a.b.1.c: 1-based list indices) of the answer, nil when missing
local function at_path(path)
    local v = doc
    for part in path:gmatch("[^.]+") do
        if type(v) ~= "table" then die("no field ", path, " in ", text:sub(1, 300)) end
        v = v[tonumber(part) or part]
    end
    return v
end

if mode == "preds" or mode == "differ" then
    local want = cli_lines(arg[3])
    local p = doc.predictions
    if type(p) ~= "table" then die("no predictions in ", text:sub(1, 200)) end
    local nulls = {}
    for i in (arg[4] or ""):gmatch("%d+") do nulls[tonumber(i)] = true end
    local first = tonumber(arg[5] or 1)
    local errs = {}
    for _, e in ipairs(doc.errors or {}) do errs[e.index] = e.error end
    local maxd, ndiff = 0, 0
    for i = 1, #p do
        local v, w = p[i], want[first + i - 1]
        if nulls[i - 1] then
            if v ~= cjson.null then die("row ", i - 1, ": null expected, got ", tostring(v)) end
            if not errs[i - 1] then die("row ", i - 1, ": not listed in errors") end
        else
            if v == cjson.null or type(v) ~= "number" then die("row ", i - 1, ": a number expected, got ",
                tostring(v)) end
            if w == nil then die("row ", i - 1, ": more predictions than CLI lines") end
            local d = math.abs(v - w)
            if d > maxd then maxd = d end
            if d > 1e-6 then ndiff = ndiff + 1 end
        end
    end
    if mode == "differ" then
        if ndiff == 0 then die("predictions equal the other model's") end
        os.exit(0)
    end
    if ndiff > 0 then die(ndiff, " predictions differ from the CLI (max |d| ", maxd, ")") end
    if doc.errors and not next(nulls) then die("unexpected errors: ", cjson.encode(doc.errors)) end
    os.exit(0)
elseif mode == "field" then
    local v = at_path(arg[3])
    if v == nil then die("no field ", arg[3], " in ", text:sub(1, 300)) end
    if arg[4] and tostring(v) ~= arg[4] then die(arg[3], " = ", tostring(v), ", expected ", arg[4]) end
    os.exit(0)
elseif mode == "count" then
    local v = at_path(arg[3])
    if type(v) ~= "table" or #v ~= tonumber(arg[4]) then
        die(arg[3], ": a list of ", arg[4], " expected, got ", type(v) == "table" and #v .. " elements" or tostring(v))
    end
    os.exit(0)
elseif mode == "has" then
    local v = at_path(arg[3])
    if type(v) ~= "string" or not v:find(arg[4], 1, true) then
        die(arg[3], " = ", tostring(v), ", expected a text containing ", arg[4])
    end
    os.exit(0)
end
die("usage: check.lua preds|field|differ|has|count|invariant ...")
