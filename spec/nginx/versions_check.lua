-- versions_check.lua — wisp.nginx's model versions without nginx: the version policy's grammar
-- (config.lua: strings and Triton-style tables, every refusal), configure{} with a model
-- repository, and models.lua's repository logic on real directories (numeric version order,
-- names that are not versions, a version directory without its model.wisp, latest N / all /
-- specific, MD.resolve / versions / repository_index / load / unload, the warm-up's record),
-- with a stand-in for the few ngx functions models.lua calls.
--
--   wisp run spec/nginx/versions_check.lua DIR     (DIR: a scratch directory; spec/v2/test_versions.py runs it)
--   WISP_NGINX_DEVICE=gpu wisp run spec/nginx/versions_check.lua DIR    (on a GPU machine)
-- The last line is "versions: N passed, N failed".

local dir = assert(arg and arg[1], "usage: versions_check.lua SCRATCH_DIR")
local pass, fail = 0, 0
local function check(ok, what, detail)
    if ok then pass = pass + 1 else fail = fail + 1; print("FAIL " .. what .. (detail and (": " .. tostring(detail)) or "")) end
end

-- ngx, as far as models.lua / metrics.lua use it in a worker
local dict_data = {}
local dict = {
    get = function(_, k) return dict_data[k] end,
    set = function(_, k, v) dict_data[k] = v; return true end,
    delete = function(_, k) dict_data[k] = nil end,
    incr = function(_, k, n, init) dict_data[k] = (dict_data[k] or init or 0) + n; return dict_data[k] end,
    get_keys = function() local t = {}; for k in pairs(dict_data) do t[#t + 1] = k end; return t end,
}
local logs = {}
ngx = { shared = { wisp = dict }, now = os.time, NOTICE = 6, ERR = 4, WARN = 5,
        log = function(_, ...) logs[#logs + 1] = table.concat({ ... }) end }

local CFG = require "wisp.nginx.config"
local S = require "wisp.nginx.state"

-- ---- the policy grammar --------------------------------------------------------------
local P = CFG.parse_policy
local function pol(v) local p, err = P(v); return p, err end
local cases = {
    { "latest", "latest 1" }, { "latest:3", "latest 3" }, { " latest : 2 ", "latest 2" }, { "all", "all" },
    { "specific:3,1,1", "specific 1,3" }, { "specific: 10, 2", "specific 2,10" },
    { { latest = { num_versions = 2 } }, "latest 2" }, { { latest = {} }, "latest 1" }, { { all = {} }, "all" },
    { { specific = { versions = { 2, "7" } } }, "specific 2,7" },
}
for _, c in ipairs(cases) do
    local p, err = pol(c[1])
    check(p and CFG.policy_text(p) == c[2], "policy " .. tostring(type(c[1]) == "table" and S.cjson or c[1]),
          p and CFG.policy_text(p) or err)
end
for _, bad in ipairs { "latest:0", "latest:x", "latest:1.5", "specific:", "specific:0", "specific:01", "specific:1,a",
                       "bogus", "all:2", "" } do
    local p, err = pol(bad)
    check(p == nil and type(err) == "string" and #err > 0, "policy '" .. bad .. "' refused", err)
end
for i, bad in ipairs { {}, { latest = { num_versions = -1 } }, { latest = {}, all = {} }, { specific = { versions = {} } },
                       { specific = 3 }, { newest = {} } } do
    check(pol(bad) == nil, "policy table #" .. i .. " refused")
end
check(pol(5) == nil, "policy: a number refused")
check(CFG.policy_table(pol("specific:1,3")).specific.versions[2] == 3, "policy_table specific")

-- ---- configure{} ---------------------------------------------------------------------
check(pcall(CFG.configure, { models = "" }) == false, "configure: no models and no repository refused")
check(pcall(CFG.configure, { model_repository = dir .. "/repo", version_policy = "nope" }) == false,
      "configure: a bad version_policy refused")
-- the device: cpu, or WISP_NGINX_DEVICE (gpu on a GPU machine: the warm-up then runs there)
local device = os.getenv("WISP_NGINX_DEVICE") or "cpu"
local want_dev = device == "cpu" and "cpu" or "gpu:0"
local ok, err = pcall(CFG.configure, { model_repository = dir .. "/repo/", version_policy = "latest:2", reload_check_s = 0.1,
                                       device = device })
check(ok and S.cfg.model_repository == dir .. "/repo" and #S.cfg.models == 0 and CFG.policy_text(S.cfg.policy) == "latest 2",
      "configure: a repository alone, its trailing / dropped, the default policy", err)

-- ---- a repository on disk ------------------------------------------------------------
local wisp = require "wisp"
local function sh(cmd)
    local rc = os.execute(cmd)
    assert(rc == 0 or rc == true, cmd)
end
local repo = dir .. "/repo"
sh("rm -rf '" .. repo .. "' && mkdir -p '" .. repo .. "'")
local function write_model(path, seed)
    local w = {}
    for i = 1, 50 do w[i] = ((i * seed) % 17 - 8) / 10 end
    assert(wisp.write_model(path, w, { bias = seed / 100 }))
end
local function version(name, v, seed)
    sh("mkdir -p '" .. repo .. "/" .. name .. "/" .. v .. "'")
    write_model(repo .. "/" .. name .. "/" .. v .. "/model.wisp", seed)
end
-- m: versions 1, 2, 10 (10 is the latest: numbers, not strings), "01" and "abc" are not
-- versions, 3 has no model.wisp, 4 is a file
version("m", "1", 3); version("m", "2", 5); version("m", "10", 7); version("m", "01", 9); version("m", "abc", 11)
sh("mkdir -p '" .. repo .. "/m/3' && touch '" .. repo .. "/m/4'")
version("s", "1", 13); version("s", "2", 15)
local f = io.open(repo .. "/s/config.json", "w"); f:write('{"version_policy": {"specific": {"versions": [1, 5]}}}'); f:close()
version("bad", "1", 17)
f = io.open(repo .. "/bad/config.json", "w"); f:write('{"version_policy": "latest:0"}'); f:close()

S.load_libs()
S.engine = assert(S.new_engine(1))
if device ~= "cpu" and S.engine:gpu_count() == 0 then
    print("skip: WISP_NGINX_DEVICE=" .. device .. " but no usable GPU (" .. S.engine:gpu_status() .. "): the warm-up runs on the CPU")
    want_dev = "cpu"
end
local MD = require "wisp.nginx.models"
MD.start_models()
check(table.concat(S.model_names, ",") == "bad,m,s", "the repository's models are slots, sorted", table.concat(S.model_names, ","))

local function served(name)
    local t = {}
    for _, v in ipairs(MD.versions(name)) do if v.state == "READY" then t[#t + 1] = v.version end end
    return table.concat(t, ",")
end
check(served("m") == "2,10", "latest 2 of 1, 2, 10: 2 and 10", served("m"))
check(served("s") == "1", "specific 1,5 with 1 and 2 present: 1", served("s"))
check(served("bad") == "1", "a config.json with a bad policy: the configuration's (latest 2)", served("bad"))
local logged = false
for _, l in ipairs(logs) do if l:find("bad/config.json: version_policy: latest:N", 1, true) then logged = true end end
check(logged, "the bad config.json is logged")

local e, slot = MD.resolve("m")
check(e and e.version == "10" and slot == S.models.m and slot.cur == e, "resolve(m): the latest ready version, 10")
check(e and type(e.warmup_ms) == "number" and e.warmup_ms > 0 and e.warmup.rows == MD.WARMUP_ROWS
      and e.warmup.devices[1] == want_dev, "the warm-up's record (ms, rows, devices: " .. want_dev .. ")",
      e and e.warmup and e.warmup.devices[1])
check(e and e.version_id and #e.version_id == 12, "version_id: the checksum's 12 hex digits")
-- the entry scores as the file does
do
    local b = assert(S.engine:batch())
    assert(b:add({ 1, 7, 49 }))
    local m = assert(wisp.load(repo .. "/m/10/model.wisp"))
    local s = assert(m:session("cpu"))
    local want = assert(s:score(b))[0]
    local got = assert(e.session:score(b))[0]
    check(math.abs(want - got) < 1e-7, "version 10's entry scores as its file", got .. " vs " .. want)
end
local e2, st, msg = MD.resolve("m", "2")
check(e2 and e2.version == "2", "resolve(m, 2)")
e2, st, msg = MD.resolve("m", "1")
check(e2 == nil and st == 404 and msg:find("not in the version policy", 1, true), "resolve(m, 1): 404, not in the policy", msg)
e2, st, msg = MD.resolve("m", "7")
check(e2 == nil and st == 404 and msg:find("versions served: 2, 10", 1, true), "resolve(m, 7): 404 with the versions served", msg)
e2, st = MD.resolve("nope")
check(e2 == nil and st == 404, "resolve(unknown): 404")

local vs = MD.versions("m")
local states = {}
for _, v in ipairs(vs) do states[#states + 1] = v.version .. "=" .. v.state end
check(table.concat(states, " ") == "1=UNAVAILABLE 2=READY 3=UNAVAILABLE 10=READY", "versions(m): sorted as numbers, 3 listed",
      table.concat(states, " "))
for _, v in ipairs(vs) do
    if v.version == "3" then check(v.reason:find("no model.wisp", 1, true), "version 3: no model.wisp", v.reason) end
end
local ix = MD.repository_index()
check(#ix == 4 + 2 + 1, "repository_index: a row per version", #ix)
check(#MD.repository_index(true) == 2 + 1 + 1, "repository_index(ready only)")

-- a version added, the check picks it up; the displaced one retires after its request
local held = S.models.m.versions["2"].cur
held.inflight = held.inflight + 1                 -- a request in flight on version 2
version("m", "11", 19)
MD.check_all()
check(served("m") == "10,11", "version 11 added: 10 and 11 served", served("m"))
check(held.retired and not held.closed, "version 2 retired, still open while its request runs")
held:release()
check(held.closed, "version 2 closed once its request ended")

-- unload, load
local uok = MD.repository_unload("m")
e2, st, msg = MD.resolve("m")
check(uok and e2 == nil and st == 503 and msg:find("unloaded", 1, true), "unload: resolve answers 503 (unloaded)", msg)
check(dict_data["unloaded\tm"] == true, "unload: in the shared dict for the other workers")
MD.check_all()
check(MD.resolve("m") == nil, "an unload holds across checks")
local lok, lst, lmsg = MD.repository_load("m")
check(lok == true and MD.resolve("m") and MD.resolve("m").version == "11", "load: served again, latest 11", lmsg)
check(dict_data["unloaded\tm"] == nil, "load: the shared dict's flag cleared")
lok, lst = MD.repository_load("zzz")
check(lok == nil and lst == 404, "load of a model the repository lacks: 404")
lok, lst = MD.repository_load("../etc")
check(lok == nil and lst == 400, "load of a name that is not one: 400")
-- a model directory new in the repository is picked up by the check
version("late", "1", 21)
MD.check_all()
check(MD.resolve("late") ~= nil and table.concat(S.model_names, ",") == "bad,late,m,s", "a new model directory: served at the next check")
-- the version directory removed: it leaves; the policy's next one serves
sh("rm -rf '" .. repo .. "/m/11'")
MD.check_all()
check(served("m") == "2,10", "version 11 removed: latest 2 is 2 and 10 again", served("m"))

-- a model directory removed from the repository: no longer served, its name gone
local lheld = MD.resolve("late")
lheld.inflight = lheld.inflight + 1
sh("rm -rf '" .. repo .. "/late'")
MD.check_all()
e2, st = MD.resolve("late")
check(e2 == nil and st == 404 and table.concat(S.model_names, ",") == "bad,m,s", "a model directory removed: 404, the name gone",
      table.concat(S.model_names, ","))
check(lheld.retired and not lheld.closed, "its version retired, open while its request runs")
lheld:release()
check(lheld.closed, "closed after that request")
local seen_late = false
for _, r in ipairs(MD.repository_index()) do if r.name == "late" then seen_late = true end end
check(not seen_late, "the index no longer lists it")
-- a listing of the repository that fails removes nothing
S.cfg.model_repository = repo .. "/no-such-dir"
MD.check_all()
check(table.concat(S.model_names, ",") == "bad,m,s" and MD.resolve("m") ~= nil, "an unreadable repository removes no model")
S.cfg.model_repository = repo

print(("versions: %d passed, %d failed"):format(pass, fail))
os.exit(fail == 0 and 0 or 1)
