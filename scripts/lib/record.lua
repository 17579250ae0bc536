-- record.lua — what every benchmark records and where (the Lua one of three: record.py, record.sh):
-- the commit (WISP_COMMIT first, else git), the machine's facts (cpu, cores, gpu), the output path
-- (build/results/ unless asked to record: --record or WISP_RECORD=1 -> scripts/results/), and the
-- one schema of scripts/results/SCHEMA.md (envelope() brings a document to it, check() says why a
-- document misses it).
--
-- As a module (from a script in scripts/<dir>/):
--   local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lib/record.lua")
--   local record = R.take_record_flag(arg)      -- removes --record from arg; true if asked to record
--   local path = R.out_path("bench_x_" .. label .. ".json", record)
--   R.write(path, doc)                          -- envelope(doc), then JSON, then "wrote PATH" on stderr
-- As a command (for the shell scripts, under `wisp run` or luajit with lua-cjson):
--   record.lua commit | machine | out-path NAME [record] | envelope IN.json OUT.json
-- scripts/results/check.lua runs check() over scripts/results/*.json (make test does).
local R = {}

local here = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$")) or "scripts/lib"
R.root = here .. "/../.."                      -- the project's root, as seen from this file

local function sh(cmd)
    local p = io.popen(cmd)
    if not p then return "" end
    local s = p:read("*a") or ""
    p:close()
    return (s:gsub("%s+$", ""))
end
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The commit the run measured: WISP_COMMIT when set (a copy of the tree without .git, such as the
-- device machine's, knows it only that way), else git's short HEAD with "+uncommitted" when tracked
-- files outside scripts/results differ from it, else "unknown (...)" saying why.
function R.commit(root)
    local env = os.getenv("WISP_COMMIT")
    if env and env ~= "" then return env end
    root = root or R.root
    local c = sh("git -C " .. q(root) .. " rev-parse --short HEAD 2>/dev/null")
    if c == "" then return "unknown (WISP_COMMIT not set and no git checkout)" end
    if sh("git -C " .. q(root) .. " status --porcelain --untracked-files=no -- . ':!scripts/results' 2>/dev/null") ~= "" then
        c = c .. "+uncommitted"
    end
    return c
end

-- cpu (model name), cores (logical CPUs this process may use), gpu (names from nvidia-smi, "N x NAME"
-- when they are alike, or "none (why)"); machine: WISP_MACHINE when set, else a line made of these.
function R.machine()
    local cpu = sh("grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//'")
    if cpu == "" then cpu = "unknown (no model name in /proc/cpuinfo)" end
    local cores = tonumber(sh("nproc 2>/dev/null")) or "unknown (nproc failed)"
    local names = {}
    for name in sh("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null"):gmatch("[^\n]+") do
        names[#names + 1] = name
    end
    local gpu
    if #names == 0 then
        gpu = sh("command -v nvidia-smi") == "" and "none (no nvidia-smi)" or "none (nvidia-smi lists no GPU)"
    else
        local same = true
        for i = 2, #names do same = same and names[i] == names[1] end
        gpu = same and (#names > 1 and (#names .. " x " .. names[1]) or names[1]) or table.concat(names, " + ")
    end
    local machine = os.getenv("WISP_MACHINE")
    if not machine or machine == "" then
        machine = string.format("%s: %s cores, %s", sh("hostname 2>/dev/null"), tostring(cores), gpu)
    end
    return { machine = machine, cpu = cpu, cores = cores, gpu = gpu }
end

-- Removes every "--record" from the argument list ARGS (in place); true if there was one or
-- WISP_RECORD=1.
function R.take_record_flag(args)
    local found = os.getenv("WISP_RECORD") == "1"
    local i = 1
    while args and args[i] ~= nil do
        if args[i] == "--record" then table.remove(args, i); found = true else i = i + 1 end
    end
    return found
end

-- Where a run's JSON goes: scripts/results/NAME when recording, build/results/NAME otherwise
-- (the directory is made); relative to the root.
function R.out_path(name, record)
    local dir = record and "scripts/results" or "build/results"
    local abs = R.root .. "/" .. dir
    os.execute("mkdir -p " .. q(abs))
    return abs .. "/" .. name
end

-- The schema (scripts/results/SCHEMA.md): required top-level keys, and the optional ones that
-- describe the run; every other key of a document is a figure and belongs under "results".
R.REQUIRED = { "machine", "cpu", "cores", "gpu", "commit", "date", "command", "peers", "results" }
R.OPTIONAL = { "benchmark", "label", "script", "issue", "what", "description", "note", "notes", "annotation",
               "setup", "workload", "mode", "device", "seconds", "machine_detail", "wisp_version",
               "definitions", "targets", "superseded" }
local known = {}
for _, k in ipairs(R.REQUIRED) do known[k] = true end
for _, k in ipairs(R.OPTIONAL) do known[k] = true end

local function is_array(t) return type(t) == "table" and (next(t) == nil and false or #t > 0) end

-- A copy of DOC in the schema: machine facts filled from DOC's own "machine" object when it has
-- one (kept as machine_detail), else from R.machine(); "peer" becomes "peers"; figures move under
-- "results" (an array "results" becomes results.runs beside them). Never invents a figure.
function R.envelope(doc, facts)
    local out, results = {}, {}
    local detail = type(doc.machine) == "table" and doc.machine or nil
    facts = facts or R.machine()
    for k, v in pairs(doc) do
        if k == "results" then
            if is_array(v) then results.runs = v
            elseif type(v) == "table" then for rk, rv in pairs(v) do results[rk] = rv end
            else results.value = v end
        elseif k == "peer" and doc.peers == nil then out.peers = v
        elseif k == "machine" and detail then out.machine_detail = detail
        elseif known[k] then out[k] = v
        else results[k] = v end
    end
    if type(out.machine) ~= "string" then out.machine = facts.machine end
    out.cpu = out.cpu or (detail and detail.cpu) or facts.cpu
    out.cores = out.cores or (detail and (detail.cores or detail.logical_cpus)) or facts.cores
    out.gpu = out.gpu or (detail and detail.gpu) or facts.gpu
    out.commit = out.commit or R.commit()
    out.date = out.date or os.date("!%Y-%m-%dT%H:%M:%SZ")
    out.results = results
    return out
end

-- The reasons DOC misses the schema (an empty list when it meets it).
function R.check(doc)
    local bad = {}
    local function no(fmt, ...) bad[#bad + 1] = string.format(fmt, ...) end
    if type(doc) ~= "table" or is_array(doc) then return { "not a JSON object" } end
    local function str(k) return type(doc[k]) == "string" and doc[k]:match("%S") ~= nil end
    local function unknown(k) return type(doc[k]) == "string" and doc[k]:match("^unknown") ~= nil end
    for _, k in ipairs(R.REQUIRED) do if doc[k] == nil then no("no %q", k) end end
    for k in pairs(doc) do if not known[k] then no("top-level %q is neither required nor optional (a figure goes under \"results\")", k) end end
    for _, k in ipairs({ "machine", "cpu", "gpu" }) do
        if doc[k] ~= nil and not str(k) then no("%q is not a non-empty string", k) end
    end
    local cmd_ok = str("command")
    if is_array(doc.command) then
        cmd_ok = true
        for _, c in ipairs(doc.command) do cmd_ok = cmd_ok and type(c) == "string" and c:match("%S") ~= nil end
    end
    if doc.command ~= nil and not cmd_ok then no("\"command\" is neither a non-empty string nor a list of them (commands run in turn)") end
    if doc.cores ~= nil and not unknown("cores") and not (type(doc.cores) == "number" and doc.cores >= 1 and doc.cores % 1 == 0) then
        no("\"cores\" is neither a whole number >= 1 nor \"unknown (why)\"")
    end
    if doc.commit ~= nil and not unknown("commit") and not (type(doc.commit) == "string" and doc.commit:match("%f[%x]%x%x%x%x%x%x%x+%f[%X]")) then
        no("\"commit\" names no commit (7+ hex digits) and does not say \"unknown (why)\"")
    end
    if doc.date ~= nil and not unknown("date") and not (type(doc.date) == "string" and
            doc.date:match("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d") and (doc.date:match("Z$") or doc.date:match("[+-]%d%d:?%d%d$"))) then
        no("\"date\" is not ISO 8601 with a zone (2026-11-29T17:58:05Z)")
    end
    if doc.peers ~= nil and not (str("peers") or (type(doc.peers) == "table" and next(doc.peers) ~= nil)) then
        no("\"peers\" is neither a non-empty object/array nor a string saying where they are or why none")
    end
    if doc.results ~= nil and not (type(doc.results) == "table" and next(doc.results) ~= nil) then
        no("\"results\" is not a non-empty object or array")
    end
    return bad
end

function R.read_json(path)
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local text = f:read("*a")
    f:close()
    local ok, doc = pcall(require("cjson").decode, text)
    if not ok then return nil, path .. ": not JSON: " .. tostring(doc) end
    return doc
end

-- envelope(doc), then JSON (ENCODE, default lua-cjson's) to PATH.
function R.write(path, doc, encode)
    local env = R.envelope(doc)
    local f = assert(io.open(path, "wb"))
    f:write((encode or require("cjson").encode)(env), "\n")
    f:close()
    io.stderr:write("wrote ", path, "\n")
    return env
end

-- ---- command line ------------------------------------------------------------------------
local cmd = arg and arg[0] and arg[0]:match("record%.lua$") and arg[1]
if cmd then
    if cmd == "commit" then print(R.commit())
    elseif cmd == "machine" then print(require("cjson").encode(R.machine()))
    elseif cmd == "out-path" then print(R.out_path(assert(arg[2], "out-path NAME [record]"), arg[3] == "record" or os.getenv("WISP_RECORD") == "1"))
    elseif cmd == "envelope" then
        local doc, err = R.read_json(assert(arg[2], "envelope IN OUT"))
        if not doc then io.stderr:write("record.lua: ", err, "\n"); os.exit(1) end
        R.write(assert(arg[3], "envelope IN OUT"), doc)
    else
        io.stderr:write("record.lua: commit | machine | out-path NAME [record] | envelope IN OUT\n")
        os.exit(2)
    end
end
return R
