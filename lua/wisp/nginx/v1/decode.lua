-- wisp/nginx/v1/decode.lua — v1's body decoded into rows, one path per format (libsvm lines, JSON
-- lines, {"instances"} of raw inputs, {"instances"} of ids and values): feature ids into the
-- request's batch, raw inputs into the entry's raw batch (left untransformed: wisp.nginx.run
-- scores them raw or transforms them, as its mode needs), with the bad rows each format reports,
-- said in the body's terms.

local ffi = require "ffi"
local S = require "wisp.nginx.state"
local J = require "wisp.nginx.json"
local I = require "wisp.nginx.v1.instances"
local RUN = require "wisp.nginx.run"

local type, tostring, ipairs = type, tostring, ipairs
local fmt, floor, huge = string.format, math.floor, math.huge
local instances_as_lines, long_number_runs = I.instances_as_lines, I.long_number_runs
local instance_errors = I.instance_errors
local bad_rows_of = RUN.bad_rows_of
local is_list, is_object, what = J.is_list, J.is_object, J.what

local M = {}

-- JSON lines (a body's, or the scanner's lines of its instances) into the entry's reused
-- raw batch: -> rows, or nil, the parser's message
local function parse_raw(tr, ptr, len, max_rows)
    tr:clear()
    local ok, err = tr:parse_jsonl_buf(ptr, len, max_rows + 1)
    if not ok then return nil, err end
    return tr:rows()
end

local function too_many(count, max_rows)
    return nil, 413, fmt("too many rows: %d in one request (limit %d)", count, max_rows), { limit_rows = max_rows }
end

local f32_box = ffi.new("float[1]")

-- decode(e, b, kind, body, blen, max_rows) -> d | nil, status, message[, extra]
-- kind: "libsvm", "jsonl" or "json" (the Content-Type's, wisp.nginx.v1.predict); body: a Lua
-- string, or (libsvm and jsonl only) a pointer to blen bytes. Feature ids go into b (the
-- request's empty batch); raw inputs (JSON lines, or {"instances"} for a model with columns)
-- into the entry's raw batch e.tr, untransformed. d = {n = rows, b = b, raw = true when the rows
-- are in e.tr, errs = list of {index, error[, line]}, bad = set of 0-based rows (both nil when
-- every row parsed), instances = true for {"instances"} of raw inputs (its bad rows are worded
-- by M.word)}.
function M.decode(e, b, kind, body, blen, max_rows)
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
        local errs, bad = bad_rows_of(tr, true)
        return { n = n, b = b, raw = true, errs = errs, bad = bad }
    end
    if kind == "libsvm" then
        -- parse_libsvm_buf: the hot-path form (positional arguments, no options table)
        local n, perr = b:parse_libsvm_buf(body, blen, max_rows + 1)
        if not n then return nil, 400, "cannot parse the libsvm body: " .. tostring(perr) end
        if n > max_rows then
            return nil, 413, fmt("too many rows: more than %d in one request", max_rows), { limit_rows = max_rows }
        end
        if n == 0 then return nil, 400, "empty request: no rows in the libsvm body" end
        local errs, bad = bad_rows_of(b, true)
        return { n = n, b = b, errs = errs, bad = bad }
    end
    local tr = e.tr
    if tr then
        -- raw rows: the C JSON-lines parser over the instances, whatever the body holds (one
        -- decode path, so a row scores the same whatever its neighbours or the other keys)
        local ptr, len, nobj, extra, firsts, starts = instances_as_lines(body, blen)
        if not ptr then
            local doc, jerr = S.cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
            if type(doc) ~= "table" or not is_list(doc.instances) then
                return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
            end
            return nil, 400, 'bad request: the key "instances" appears more than once'
        end
        if nobj == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
        if nobj > max_rows then return too_many(nobj, max_rows) end
        local n, perr = parse_raw(tr, ptr, len, max_rows)
        if not n then return nil, 500, "cannot parse the instances: " .. tostring(perr) end
        if n ~= nobj then return nil, 500, fmt("instances: %d elements read as %d rows", nobj, n) end
        if extra or tr:bad_count() > 0 then
            -- the C parser read each instance; cjson only says whether the whole body is JSON
            local doc, jerr = S.cjson.decode(body)
            if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
        end
        local errs, bad = bad_rows_of(tr, true)
        return { n = n, b = b, raw = true, errs = instance_errors(errs, firsts, starts), bad = bad, instances = true }
    end
    local errs, bad = {}, {}
    -- JSON
    local doc, jerr = S.cjson.decode(body)
    if doc == nil then return nil, 400, "bad JSON: " .. tostring(jerr) end
    if type(doc) ~= "table" or not is_list(doc.instances) then
        return nil, 400, 'bad request: a JSON object {"instances": [row, ...]} expected'
    end
    local inst = doc.instances
    local n = #inst
    if n == 0 then return nil, 400, "empty request: \"instances\" holds no rows" end
    if n > max_rows then return too_many(n, max_rows) end
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
        elseif not is_object(row) then
            msg = "an object {\"ids\": [...], \"vals\": [...]} expected, got " .. what(row)
        else
            ids, vals = row.ids, row.vals
            if vals == S.cjson.null then vals = nil end
            if not is_list(ids) then
                msg = "\"ids\": a list of feature ids expected, got " .. what(ids)
            end
        end
        if not msg then
            local nid = #ids
            for k = 1, nid do
                local v = ids[k]
                if type(v) ~= "number" or v < 0 or v ~= floor(v) then
                    msg = fmt("\"ids\"[%d]: a non-negative integer expected, got %s", k - 1, what(v)); break
                elseif v >= 18446744073709551616 then
                    msg = fmt("\"ids\"[%d]: %s overflows 64 bits", k - 1, what(v)); break
                end
            end
            if not msg and vals ~= nil then
                if not is_list(vals) then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %s", nid, what(vals))
                elseif #vals ~= nid then
                    msg = fmt("\"vals\": a list of %d numbers (one per id) expected, got %d", nid, #vals)
                else
                    for k = 1, nid do
                        local v = vals[k]
                        if type(v) ~= "number" then
                            msg = fmt("\"vals\"[%d]: a number expected, got %s", k - 1, what(v)); break
                        end
                        f32_box[0] = v
                        local f = f32_box[0]
                        if f ~= f or f == huge or f == -huge then
                            msg = fmt("\"vals\"[%d]: %s is not a finite float32", k - 1, what(v)); break
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
    return { n = n, b = b, errs = errs, bad = bad }
end

-- the bad rows the scoring of a decoded request found (the transform's, the session's after
-- score_raw), said in the body's terms: an {"instances"} body's rows are its elements, not lines.
-- wisp.nginx.run calls it before anything yields, while the scanner's buffers hold this body's.
function M.word(d, errs)
    if d.instances then return instance_errors(errs, I.firsts(), I.starts()) end
    return errs
end

return M
