-- wisp/nginx/thread.lua — mode "thread": a predict request (v1) or an infer request (v2) scored in
-- a pool thread's own Lua VM (ngx.run_worker_thread(pool, "wisp.nginx.thread", "predict" | "infer",
-- ...)), with its own engine and its own copy of exactly the model version the request holds,
-- scored by the worker's route (wisp.nginx.score: score_raw for raw rows, the session's bad
-- rows; v2: wisp.nginx.v2's run_infer, the worker's own infer).

local S = require "wisp.nginx.state"
local F = require "wisp.nginx.file"
local MD = require "wisp.nginx.models"
local R = require "wisp.nginx.request"
local A = require "wisp.nginx.answer"
local MT = require "wisp.nginx.metrics"

local tostring, pairs = tostring, pairs
local file_stamp, open_entry = F.file_stamp, MD.open_entry
local score = require("wisp.nginx.score").score
local parse_into, encode_answer, clean_strings, last_stages = R.parse_into, A.encode_answer, A.clean_strings, MT.last_stages

local M = {}

local thread_entries = {}     -- in a thread VM: path -> entry
local thread_failed = {}      -- in a thread VM: path -> the file stamp that failed to load as asked

-- ngx.run_worker_thread(pool, "wisp.nginx.thread", "predict", name, path, stamp, checksum, device, kind,
-- body, max_rows) -> status, body, rows, bad rows, device, kernel ns, total ns.
-- The thread's VM scores with its own copy of exactly the version the request holds
-- (file stamp and header checksum): it (re)maps the file only when the stamp asked for
-- differs from its copy's, and keeps the copy only when the file is that version. When it
-- cannot (the file was renamed over since, or is broken) the status is 0: "stale", and
-- the worker scores the request inline with the entry it holds; the same file is not
-- tried again by this VM until it changes.
-- this VM's copy of exactly the version (path, stamp, checksum): -> entry | false (stale: the
-- worker scores inline) | nil, the engine's error
local function entry_for(name, path, stamp, checksum, device)
    S.load_libs()
    if not S.engine then
        local engine, err = S.new_engine(1)
        S.engine = engine
        if not engine then return nil, "engine: " .. tostring(err) end
    end
    local e = thread_entries[path]
    if not e or e.stamp ~= stamp or e.checksum ~= checksum then
        local now = file_stamp(path)
        if now == nil or now ~= stamp or thread_failed[path] == now then return false end
        local ne = open_entry(name, path, device)
        if not ne or ne.stamp ~= stamp or ne.checksum ~= checksum then
            if ne then ne:close() end
            thread_failed[path] = now
            return false
        end
        if e then e:close() end
        thread_entries[path] = ne
        thread_failed[path] = nil
        e = ne
    end
    return e
end

function M.predict(name, path, stamp, checksum, device, kind, body, max_rows)
    local e, eerr = entry_for(name, path, stamp, checksum, device)
    if e == nil then return 503, S.cjson.encode { error = eerr } .. "\n", 0, 0, "", 0, 0 end
    if not e then return 0, "", 0, 0, "", 0, 0 end
    local b = e.batch
    b:clear()
    -- the worker's route: raw rows stay raw (score_raw), the session lists the rows it refused
    local n, errs, bad, extra = parse_into(e, b, kind, body, max_rows, true)
    if not n then
        local t = { error = bad }
        if extra then for k, v in pairs(extra) do t[k] = v end end
        return errs, S.cjson.encode(clean_strings(t, 0)) .. "\n", 0, 0, "", 0, 0
    end
    local out
    out, errs, bad = score(e, b, kind, n, errs, bad, extra == true)
    if not out then return 500, S.cjson.encode { error = tostring(errs) } .. "\n", n, 0, "", 0, 0 end
    local dev = e.session:last_device()
    local st = last_stages(e.session)
    local status, text = encode_answer(e, n, out, bad, errs, dev)
    return status, text, n, errs and #errs or 0, dev, st.ns_kernel, st.ns_total
end

-- ngx.run_worker_thread(pool, "wisp.nginx.thread", "infer", name, version, path, stamp, checksum,
-- device, body, header length text, max_rows) -> status (0: stale, as predict's), body,
-- content type ("" for JSON), binary header length (0: none), the counts to make (lines
-- "metric\tlabels\tn"), rows, kernel ns, total ns. The worker's own infer (wisp.nginx.v2
-- run_infer), in mode inline: decode, rows, score, answer, here.
function M.infer(name, ver, path, stamp, checksum, device, body, hlen_text, max_rows)
    local e, eerr = entry_for(name, path, stamp, checksum, device)
    if e == nil then return 503, S.cjson.encode { error = eerr } .. "\n", "", 0, "", 0, 0, 0 end
    if not e then return 0, "", "", 0, "", 0, 0, 0 end
    local V2 = require "wisp.nginx.v2"
    local sink = V2.thread_sink()
    local _, n, sess = V2.run_infer(sink, e, name, ver, body, #body, hlen_text, "inline", max_rows)
    local kns, tns = 0, 0
    if n and sess then
        local st = last_stages(sess)
        kns, tns = st.ns_kernel, st.ns_total
    end
    return sink.status, sink.text, sink.ctype or "", sink.hlen or 0, table.concat(sink.counts, "\n"), n or 0, kns, tns
end

return M
