-- wisp/nginx/v2/encode.lua — v2's infer answer: {"model_name", "model_version", "id", "parameters",
-- "outputs"} with the outputs probability (FP32 [rows]) and bad_rows (INT64 [k]: the 0-based rows that
-- could not be scored, NaN / null in probability), as JSON tensors or in the binary tensor data
-- extension; the bad rows' reasons in the parameter "bad_row_reasons" (a JSON text of [{"index",
-- "error"}], v1's "bad_rows" entries). Every row bad: 400, as v1 answers. No ngx here.

local S = require "wisp.nginx.state"
local J = require "wisp.nginx.json"
local B = require "wisp.nginx.v2.binary"

local tostring, ipairs = tostring, ipairs
local fmt, concat, sort = string.format, table.concat, table.sort
local utf8_clean, float_items = J.utf8_clean, J.float_items

local M = {}

local function by_index(a, b) return a.index < b.index end

-- the answer's constant parts, made once: the head by model and version name, the parameters
-- by device when no row is bad, the outputs when the request names none (no tables, no cjson
-- call a request: the v2 answer costs what v1's does)
local head_memo, params_memo = {}, {}
local OUTS_JSON = { { name = "probability", binary = false }, { name = "bad_rows", binary = false } }
local OUTS_BIN = { { name = "probability", binary = true }, { name = "bad_rows", binary = true } }
local NO_BAD = {}
local function head_of(name, ver)
    local byv = head_memo[name]
    if not byv then byv = {}; head_memo[name] = byv end
    local h = byv[ver]
    if not h then
        local cj = S.cjson
        h = '{"model_name":' .. cj.encode(name) .. ',"model_version":' .. cj.encode(ver)
        byv[ver] = h
    end
    return h
end
local function params_of(device)
    local k = device or false
    local t = params_memo[k]
    if not t then t = S.cjson.encode { device = device }; params_memo[k] = t end
    return t
end

-- encode(sink, e, d, out, device) -> the status sent (wisp.nginx.run's protocol encode): the n
-- scores out of the decoded request d (d.req: the outputs asked for, binary or not, the id)
function M.encode(sink, e, d, out, device)
    local n, errs, bad, req = d.n, d.errs, d.bad, d.req
    local nbad = errs and #errs or 0
    if nbad > 0 then
        sort(errs, by_index)
        for _, er in ipairs(errs) do er.error = utf8_clean(tostring(er.error)); er.line = nil end
    end
    if nbad >= n then
        local why = {}
        for i = 1, nbad < 10 and nbad or 10 do why[i] = fmt("row %d: %s", errs[i].index, errs[i].error) end
        return sink.fail(400, "no row could be scored: " .. concat(why, "; ") .. (nbad > 10 and "; ..." or ""))
    end
    local outs
    local want = req.outputs
    if want then
        outs = {}
        for _, o in ipairs(want) do             -- (names checked by the decoder)
            local bin = o.binary
            if bin == nil then bin = req.binary_output end
            outs[#outs + 1] = { name = o.name, binary = bin }
        end
    else
        outs = req.binary_output and OUTS_BIN or OUTS_JSON
    end
    local badlist = NO_BAD
    if bad then
        badlist = {}
        for i = 0, n - 1 do if bad[i] then badlist[#badlist + 1] = i end end
    end
    local cj = S.cjson
    local params_json
    if nbad > 0 then
        params_json = cj.encode { device = device, bad_row_reasons = cj.encode(errs) }
    else
        params_json = params_of(device)
    end
    local parts = { head_of(e.name, e.version) }
    if req.id then parts[#parts + 1] = ',"id":'; parts[#parts + 1] = cj.encode(utf8_clean(req.id)) end
    parts[#parts + 1] = ',"parameters":'
    parts[#parts + 1] = params_json
    parts[#parts + 1] = ',"outputs":['
    local bins = {}
    for k, o in ipairs(outs) do
        if k > 1 then parts[#parts + 1] = "," end
        if o.name == "probability" then
            parts[#parts + 1] = fmt('{"name":"probability","datatype":"FP32","shape":[%d]', n)
            if o.binary then
                bins[#bins + 1] = B.probabilities(out, n, bad)
                parts[#parts + 1] = fmt(',"parameters":{"binary_data_size":%d}}', 4 * n)
            else
                parts[#parts + 1] = ',"data":['
                parts[#parts + 1] = float_items(out, n, bad)
                parts[#parts + 1] = "]}"
            end
        else
            local k2 = #badlist
            parts[#parts + 1] = fmt('{"name":"bad_rows","datatype":"INT64","shape":[%d]', k2)
            if o.binary then
                bins[#bins + 1] = B.indices(badlist)
                parts[#parts + 1] = fmt(',"parameters":{"binary_data_size":%d}}', 8 * k2)
            else
                parts[#parts + 1] = ',"data":[' .. concat(badlist, ",") .. "]}"
            end
        end
    end
    parts[#parts + 1] = "]}"
    local head = concat(parts)
    if #bins == 0 then return sink.send(200, head .. "\n") end
    return sink.send(200, head .. concat(bins), "application/octet-stream", #head)
end

return M
