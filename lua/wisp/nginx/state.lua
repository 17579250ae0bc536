-- wisp/nginx/state.lua — what the wisp.nginx modules share in one worker (or one thread VM):
-- the configuration, the model slots, the engine, and the libraries loaded after fork.
--
-- Nothing here loads libwisp at require time: configure{} runs in nginx's master (before
-- the fork) and must map no library; load_libs() runs in init_worker and in a thread VM.

local S = {
    cfg = nil,            -- options from configure() (wisp.nginx.config)
    models = {},          -- name -> slot {name, path, device, cur = entry, ...}
    model_names = {},     -- sorted names
    engine = nil,         -- this worker's engine (one per worker or thread VM)
    wisp = nil,           -- require "wisp", loaded by load_libs
    cjson = nil,          -- a private cjson instance (its settings are ours)
    thread_sema = nil,    -- bounds this worker's calls into the thread pool (mode thread/auto)
    clock = nil,          -- seconds, from wisp_clock_ns (ngx.now() is the cached millisecond time)
}

function S.load_libs()
    if S.wisp then return end
    local wisp = require "wisp"
    S.clock = wisp.clock
    local cjson = require("cjson.safe").new()
    cjson.encode_number_precision(9)          -- float32 round-trips in 9 digits
    cjson.encode_sparse_array(true)
    cjson.decode_max_depth(32)
    S.cjson = cjson
    S.wisp = wisp
end

function S.new_engine(threads)
    local e, err = S.wisp.engine { threads = threads }
    if not e then return nil, err end
    return e
end

function S.log(level, ...)
    if ngx and ngx.log then ngx.log(level, "wisp: ", ...) end
end

return S
