-- wisp/nginx/thread.lua — mode "thread": a request (v1's predict, v2's infer) decoded, run and encoded in
-- a pool thread's own Lua VM (ngx.run_worker_thread(pool, "wisp.nginx.thread", "serve", ...), from
-- wisp.nginx.run), with its own engine and its own copy of exactly the model version the request
-- holds, through the worker's own path (wisp.nginx.run's serve, mode inline).

local S = require "wisp.nginx.state"
local F = require "wisp.nginx.file"
local MD = require "wisp.nginx.models"
local MT = require "wisp.nginx.metrics"
local H = require "wisp.nginx.http"
local RUN = require "wisp.nginx.run"

local tostring, require = tostring, require
local concat = table.concat
local file_stamp, open_entry, last_stages = F.file_stamp, MD.open_entry, MT.last_stages

local M = {}

local thread_entries = {}     -- in a thread VM: path -> entry
local thread_failed = {}      -- in a thread VM: path -> the file stamp that failed to load as asked

-- This VM's copy of exactly the version the request holds (path, file stamp, header checksum):
-- it (re)maps the file only when the stamp asked for differs from its copy's, and keeps the copy
-- only when the file is that version. -> entry | false (stale: the file was renamed over since,
-- or is broken; the worker runs the request inline with the entry it holds, and this VM does not
-- try the same file again until it changes) | nil, the engine's error
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

-- serve(protocol module, name, path, stamp, checksum, device, body, arg, max_rows) -> status (0:
-- stale), body, content type ("" for JSON), binary header length (0: none), the counts to make
-- (lines "metric\tlabels\tn"), rows, kernel ns, total ns.
function M.serve(module, name, path, stamp, checksum, device, body, arg, max_rows)
    local e, eerr = entry_for(name, path, stamp, checksum, device)
    if e == nil then return 503, H.error_body(eerr), "", 0, "", 0, 0, 0 end
    if not e then return 0, "", "", 0, "", 0, 0, 0 end
    local sink = RUN.thread_sink()
    local _, n, sess = RUN.serve(require(module).protocol, sink, e, body, #body, arg, "inline", max_rows, false)
    local kns, tns = 0, 0
    if n and sess then
        local st = last_stages(sess)
        kns, tns = st.ns_kernel, st.ns_total
    end
    return sink.status, sink.text, sink.ctype or "", sink.hlen or 0, concat(sink.counts, "\n"), n or 0, kns, tns
end

return M
