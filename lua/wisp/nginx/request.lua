-- wisp/nginx/request.lua — a predict request's body parsed into a batch or a raw batch, one path
-- per format (libsvm lines, JSON lines, {"instances"} of raw inputs, {"instances"} of ids and
-- values), with the bad rows each format reports, said in the body's terms.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local I = require "wisp.nginx.instances"

local type, tostring, tonumber, pairs, ipairs, next = type, tostring, tonumber, pairs, ipairs, next
local fmt, floor, huge = string.format, math.floor, math.huge
local instances_as_lines, long_number_runs, instance_errors = I.instances_as_lines, I.long_number_runs, I.instance_errors

local M = {}

-- a list of {row, line, msg} (the Lua layer's bad rows) -> errs (list of {index, error[,
-- line]}), bad (set: 0-based index -> true); nil, nil for none
local function errs_of(list, with_line)
    if not list or #list == 0 then return nil, nil end
    local errs, bad = {}, {}
    for _, r in ipairs(list) do
        errs[#errs + 1] = { index = r.row, line = with_line and r.line or nil, error = r.msg }
        bad[r.row] = true
    end
    return errs, bad
end

-- the bad rows of a raw batch (its parser's) -> errs, bad, or nil when there is none
local function raw_bad_rows(tr)
    if tr:bad_count() == 0 then return nil, nil end
    return errs_of(tr:bad_rows(), true)
end

-- the bad rows of a batch b (after the transform: the raw rows' and the transform's own)
local function batch_bad_rows(b, with_line)
    if b:bad_count() == 0 then return nil, nil end
    return errs_of(b:bad_rows(), with_line)
end

-- JSON lines (a body's, or the scanner's lines of its instances) into the entry's reused
-- raw batch: -> rows, or nil, the parser's message
local function parse_raw(tr, ptr, len, max_rows)
    tr:clear()
    local ok, err = tr:parse_jsonl_buf(ptr, len, max_rows + 1)
    if not ok then return nil, err end
    return tr:rows()
end

-- JSON values as cjson decodes them (lua-cjson 2.1 marks no arrays): a list is a table
-- whose keys are exactly 1..#t (an empty table counts as a list: {} and [] decode alike);
-- an object any other table (an empty one too)
local function json_is_list(t)
    local n = #t
    if n == 0 then return next(t) == nil end
    local k = 0
    for _ in pairs(t) do k = k + 1 end
    return k == n
end
local function json_is_object(t) return next(t) == nil or not json_is_list(t) end

-- what a JSON value is, for messages: the string "1", a list, an object, null, true, 1.5
local function json_what(v)
    local t = type(v)
    if v == nil then return "nothing (the key is missing)" end
    if t == "string" then
        local s = S.cjson.encode(#v > 40 and v:sub(1, 40) .. "..." or v)
        return "the string " .. s
    end
    if t == "table" then
        if next(v) == nil then return "an empty list or object" end
        return json_is_list(v) and "a list" or "an object"
    end
    if t == "number" then
        if v ~= v then return "NaN" elseif v == huge then return "a number beyond the range of a double (read as +inf)"
        elseif v == -huge then return "a number beyond the range of a double (read as -inf)" end
        return fmt("%.17g", v)
    end
    if t == "boolean" then return tostring(v) end
    if S.cjson and v == S.cjson.null then return "null" end
    return t
end
local f32_box = ffi.new("float[1]")

-- parse a request body into a batch (rows appended to b, an empty batch; the transformer
-- is used for JSON rows of a model with columns). Returns rows, errs (list of {index,
-- error[, line]}), bad (set: 0-based index -> true), both nil when every row parsed; or
-- nil, status, message, extra. raw_ok (JSON lines only): leave the rows in the entry's
-- transformer (e.tr) for wisp_session_score_raw, untransformed; the 4th result is then true.
-- body: a Lua string, or (kind libsvm or jsonl only) a pointer to blen bytes.
local function parse_into(e, b, kind, body, max_rows, raw_ok, blen)
    blen = blen or #body
    if kind == "jsonl" then
        -- JSON lines of raw inputs: the C parser straight into the entry's reused raw batch
        local tr = e.tr
        if not tr then
            return nil, 415, "application/x-ndjson (JSON lines of raw inputs) needs a model with feature columns;"
                .. " use application/json {\"instances\": [{\"ids\": [...], \"vals\": [...]}]} or text/x-libsvm"
        end
        local n, perr = parse_raw(tr, body, blen, max_rows)
        if not n then return nil, 400, "cannot parse the JSON lines body: " .. tostring(perr) end
        if n > max_rows then
            return nil, 413, fmt("too many rows: more than %d in one request", max_rows), { limit_rows = max_rows }
        end
        if n == 0 then return nil, 400, "empty request: no rows in the JSON lines body" end
        if raw_ok then
            local errs, bad = raw_bad_rows(tr)
            return n, errs, bad, true
        end
        local ok, terr = tr:transform(b)
        if not ok then return nil, 500, tostring(terr) end
        local errs, bad = batch_bad_rows(b, true)
        return n, errs, bad
    end
    if kind == "libsvm" then
        -- parse_libsvm_buf: the hot-path form (positional arguments, no options table)
        local n, perr = b:parse_libsvm_buf(body, blen, max_rows + 1)
        if not n then return nil, 400, "cannot parse the libsvm body: " .. tostring(perr) end
        if n > max_rows then
            return nil, 413, fmt("too many rows: more than %d in one request", max_rows), { limit_rows = max_rows }
        end
        if n == 0 then return nil, 400, "empty request: no rows in the libsvm body" end
        if b:bad_count() == 0 then return n end
        local errs, bad = batch_bad_rows(b, true)
        return n, errs, bad
    end
    local tr = e.tr
    if tr then
        -- raw rows: the C JSON-lines parser over the instances, whatever the body holds (one
        -- decode path, so a row scores the same whatever its neighbours or the other keys)
        local ptr, len, nobj, extra, firsts, starts = instances_as_lines(body, blen)
        if not ptr then
            local doc, jerr = S.cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
            if type(doc) ~= "table" or type(doc.instances) ~= "table" or not json_is_list(doc.instances) then
                return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
            end
            return nil, 400, 'bad request: the key "instances" appears more than once'
        end
        if nobj == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
        if nobj > max_rows then
            return nil, 413, fmt("too many rows: %d in one request (limit %d)", nobj, max_rows), { limit_rows = max_rows }
        end
        local n, perr = parse_raw(tr, ptr, len, max_rows)
        if not n then return nil, 500, "cannot parse the instances: " .. tostring(perr) end
        if n ~= nobj then return nil, 500, fmt("instances: %d elements read as %d rows", nobj, n) end
        if extra or tr:bad_count() > 0 then
            -- the C parser read each instance; cjson only says whether the whole body is JSON
            local doc, jerr = S.cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
        end
        if raw_ok then
            local errs, bad = raw_bad_rows(tr)
            return n, instance_errors(errs, firsts, starts), bad, true
        end
        local ok, terr = tr:transform(b)
        if not ok then return nil, 500, tostring(terr) end
        local errs, bad = batch_bad_rows(b, true)
        return n, instance_errors(errs, firsts, starts), bad
    end
    local errs, bad = {}, {}
    -- JSON
    local doc, jerr = S.cjson.decode(body)
    if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
    if type(doc) ~= "table" or type(doc.instances) ~= "table" or not json_is_list(doc.instances) then
        return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
    end
    local inst = doc.instances
    local n = #inst
    if n == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
    if n > max_rows then
        return nil, 413, fmt("too many rows: %d in one request (limit %d)", n, max_rows), { limit_rows = max_rows }
    end
    -- numbers longer than the C readers take (511 bytes: libsvm refuses them, naming them):
    -- cjson would read them; the rows that hold one are refused the same way
    local long_rows
    local runs = long_number_runs(body)
    if runs then
        long_rows = {}
        local ptr, spanlen, nobj, _, _, starts = instances_as_lines(body)
        local sp = ptr and I.offset_of(ptr) or 0
        for _, r in ipairs(runs) do
            local off = r[1] - 1
            if ptr and nobj > 0 and off >= sp and off < sp + spanlen then
                local k = nobj - 1
                while k > 0 and starts[k] > off do k = k - 1 end
                long_rows[k] = fmt("a number of %d characters ('%s...'), longer than the 511 bytes the readers take",
                                   r[2], body:sub(r[1], r[1] + 23))
            end
        end
    end
    -- a model without columns: {"ids": [...], "vals": [...]}. The rules (the C readers' for
    -- libsvm): an id is a JSON number with an integer value, 0 <= id < 2^64; ids >= the
    -- model's features are ignored when scored (as libsvm's, as LIBLINEAR does; a double
    -- holds every id below 2^53 exactly, and any id at or above 2^53 is out of every
    -- model's range, so the rounding cannot change a score); a value is a JSON number
    -- that is a finite float32 (|v| below 3.4028235e38 once rounded). Anything else makes
    -- the row bad, with a message naming what was sent.
    for i = 1, n do
        local row = inst[i]
        local msg
        local ids, vals
        if long_rows and long_rows[i - 1] then
            msg = long_rows[i - 1]
        elseif type(row) ~= "table" or not json_is_object(row) then
            msg = "an object {\"ids\": [...], \"vals\": [...]} expected, got " .. json_what(row)
        else
            ids, vals = row.ids, row.vals
            if vals == S.cjson.null then vals = nil end
            if type(ids) ~= "table" or not json_is_list(ids) then
                msg = "\"ids\": a list of feature ids expected, got " .. json_what(ids)
            end
        end
        if not msg then
            local nid = #ids
            for k = 1, nid do
                local v = ids[k]
                if type(v) ~= "number" or v < 0 or v ~= floor(v) then
                    msg = fmt("\"ids\"[%d]: a non-negative integer expected, got %s", k - 1, json_what(v)); break
                elseif v >= 18446744073709551616 then
                    msg = fmt("\"ids\"[%d]: %s overflows 64 bits", k - 1, json_what(v)); break
                end
            end
            if not msg and vals ~= nil then
                if type(vals) ~= "table" or not json_is_list(vals) then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %s", nid, json_what(vals))
                elseif #vals ~= nid then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %d", nid, #vals)
                else
                    for k = 1, nid do
                        local v = vals[k]
                        if type(v) ~= "number" then
                            msg = fmt("\"vals\"[%d]: a number expected, got %s", k - 1, json_what(v)); break
                        end
                        f32_box[0] = v
                        local f = f32_box[0]
                        if f ~= f or f == huge or f == -huge then
                            msg = fmt("\"vals\"[%d]: %s is not a finite float32", k - 1, json_what(v)); break
                        end
                    end
                end
            end
        end
        local ok, err
        if not msg then
            ok, err = b:add(ids, vals)
            if not ok then msg = tostring(err) end
        end
        if msg then
            b:add({})
            errs[#errs + 1] = { index = i - 1, error = msg }
            bad[i - 1] = true
        end
    end
    return n, errs, bad
end

M.errs_of = errs_of
M.batch_bad_rows = batch_bad_rows
M.parse_into = parse_into

return M
