-- wisp/nginx/v1/instances.lua — the {"instances": [...]} scanner: a JSON body of a model with feature
-- columns made JSON lines for the C parser (wisp_raw_parse_jsonl) in one reused buffer, the
-- scan's element offsets, and its bad rows said in the body's terms.

local ffi = require "ffi"
local S = require "wisp.nginx.state"

local tonumber, ipairs = tonumber, ipairs

local M = {}

-- {"instances": [...]} for a model with columns, without cjson's numbers: the body is
-- copied into a reused buffer where the commas between the instances become newlines and
-- the newlines inside them spaces (JSON strings hold no raw newline), so that the span
-- between [ and ] is JSON lines for wisp_raw_parse_jsonl, which reads every number from
-- its text (an int64 input above 2^53 stays exact; cjson would round it through a double).
-- Every body for a model with columns takes this one path: other top-level keys
-- ("signature_name", ...) are skipped, an instance that is not an object becomes a line
-- the C parser refuses (a bad row, named below), and a body with such keys or a bad row is
-- also decoded by cjson only to check that it is valid JSON (else 400, as before).
-- -> pointer, length, instances, extra (a key other than "instances" was seen), the
-- elements' first bytes (uint8 array) and the body offsets of their lines (uint32 array); or nil
-- when the body is not an object with one "instances" list (the caller asks cjson why).
local lines_buf, lines_cap = nil, 0
local lines_arr = ffi.typeof("uint8_t[?]")
local starts_buf, starts_cap, firsts_buf = nil, 0, nil
local function is_ws(c) return c == 32 or c == 9 or c == 10 or c == 13 end

-- the index after the JSON string that starts at p[i] == '"' (nil when it does not end),
-- and whether it holds an escape
local function skip_string(p, i, len)
    local has_esc = false
    i = i + 1
    while i < len do
        local c = p[i]
        if c == 92 then has_esc = true; i = i + 2
        elseif c == 34 then return i + 1, has_esc
        elseif c < 32 then return nil
        else i = i + 1 end
    end
    return nil
end

-- the index after the JSON value at p[i] (structure only: cjson checks the rest), or nil
local function skip_value(p, i, len)
    local c = p[i]
    if c == 34 then return (skip_string(p, i, len)) end
    if c == 123 or c == 91 then
        local depth = 0
        while i < len do
            c = p[i]
            if c == 34 then
                i = skip_string(p, i, len)
                if not i then return nil end
            else
                if c == 123 or c == 91 then depth = depth + 1
                elseif c == 125 or c == 93 then
                    depth = depth - 1
                    if depth == 0 then return i + 1 end
                end
                i = i + 1
            end
        end
        return nil
    end
    while i < len do                                  -- a number or a literal
        c = p[i]
        if c == 44 or c == 125 or c == 93 or is_ws(c) then break end
        i = i + 1
    end
    return i
end

-- record element nobj + 1 (0-based nobj): its line's start and first byte -> nobj + 1
local function note_element(nobj, ls, c)
    if nobj >= starts_cap then
        starts_cap = nobj * 2 > 64 and nobj * 2 or 64
        local ns, nf = ffi.new("uint32_t[?]", starts_cap), ffi.new("uint8_t[?]", starts_cap)
        if starts_buf then ffi.copy(ns, starts_buf, nobj * 4); ffi.copy(nf, firsts_buf, nobj) end
        starts_buf, firsts_buf = ns, nf
    end
    starts_buf[nobj] = ls; firsts_buf[nobj] = c
    return nobj + 1
end

local function instances_as_lines(body, blen)
    local len = blen or #body
    if len > lines_cap then
        lines_cap = len > 2 * lines_cap and len or 2 * lines_cap
        lines_buf = lines_arr(lines_cap)
    end
    local p = lines_buf
    ffi.copy(p, body, len)
    local i = 0
    while i < len and is_ws(p[i]) do i = i + 1 end
    if i >= len or p[i] ~= 123 then return nil end
    i = i + 1
    local first, extra, span, spanlen, nobj = true, false, nil, 0, 0
    while true do
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if first and p[i] == 125 then break end       -- {}
        first = false
        if p[i] ~= 34 then return nil end
        local ke, has_esc = skip_string(p, i, len)
        if not ke then return nil end
        local key = ffi.string(p + i + 1, ke - i - 2)
        if has_esc then key = S.cjson.decode('"' .. key .. '"') end
        i = ke
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len or p[i] ~= 58 then return nil end   -- ':'
        i = i + 1
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if key == "instances" then
            if span or p[i] ~= 91 then return nil end   -- a second "instances", or not a list
            -- the elements: at depth 0, ',' -> '\n' and each element's start recorded; one
            -- loop with the string state inline (a loop per string, as skip_string, made a
            -- trace exit a string: 1.8x the time)
            local s = i + 1
            local depth, want, close, ls = 0, true, nil, s
            local instr, esc = false, false
            local j = s
            while j < len do
                local c = p[j]
                if instr then
                    if esc then esc = false
                    elseif c == 92 then esc = true
                    elseif c == 34 then instr = false
                    elseif c < 32 then return nil end            -- a raw control character
                elseif c == 34 then
                    instr = true
                    if depth == 0 then
                        if not want then return nil end
                        want = false; nobj = note_element(nobj, ls, c)
                    end
                elseif c == 123 or c == 91 then                  -- { [
                    if depth == 0 then
                        if not want then return nil end
                        want = false; nobj = note_element(nobj, ls, c)
                    end
                    depth = depth + 1
                elseif c == 125 or c == 93 then                  -- } ]
                    if depth == 0 then
                        if c ~= 93 or (want and nobj > 0) then return nil end   -- '}' or a trailing ','
                        close = j; break
                    end
                    depth = depth - 1
                elseif c == 10 or c == 13 then p[j] = 32
                elseif depth == 0 then
                    if c == 44 then                              -- ,
                        if want then return nil end              -- an empty element
                        p[j] = 10; want = true; ls = j + 1
                    elseif c ~= 32 and c ~= 9 then               -- a number's or a literal's byte
                        if want then want = false; nobj = note_element(nobj, ls, c)
                        elseif p[j - 1] == 32 or p[j - 1] == 9 then return nil end   -- a second value
                    end
                end
                j = j + 1
            end
            if not close then return nil end
            span, spanlen = s, close - s
            i = close + 1
        else
            extra = true
            i = skip_value(p, i, len)
            if not i then return nil end
        end
        while i < len and is_ws(p[i]) do i = i + 1 end
        if i >= len then return nil end
        if p[i] == 125 then break end
        if p[i] ~= 44 then return nil end
        i = i + 1
    end
    i = i + 1
    while i < len and is_ws(p[i]) do i = i + 1 end
    if i < len or not span then return nil end
    return p + span, spanlen, nobj, extra, firsts_buf, starts_buf
end
-- the runs of number characters ([0-9.eE+-]) over 511 bytes in body: a list of {start
-- (1-based), length}, or nil. A byte loop the JIT compiles (~1 ns a byte; a Lua pattern of
-- 512 classes cost ~45 ns a byte)
local NUMCH = ffi.new("uint8_t[256]")
for ch in ("0123456789.eE+-"):gmatch(".") do NUMCH[ch:byte()] = 1 end
local u8ptr = ffi.typeof("const uint8_t *")
local function long_number_runs(body)
    local p = ffi.cast(u8ptr, body)
    local list, run = nil, 0
    local n = #body
    for i = 0, n do
        if i < n and NUMCH[p[i]] == 1 then run = run + 1
        else
            if run > 511 then list = list or {}; list[#list + 1] = { i - run + 1, run } end
            run = 0
        end
    end
    return list
end
local function inst_firsts() return firsts_buf end
local function inst_starts() return starts_buf end


-- the bad rows of an {"instances"} body as the C parser gave them, said in the body's
-- terms: an instance that is not an object is named for what it is, a column of its
-- line becomes a byte of the body; no line numbers (the instances are not lines)
local FIRST_KIND = { [34] = "a string", [91] = "a list", [110] = "null", [116] = "true", [102] = "false" }
local function instance_errors(errs, firsts, starts)
    if not errs then return nil end
    for _, er in ipairs(errs) do
        local r = er.index
        local c = firsts[r]
        if c ~= 123 then
            er.error = "an object of input values expected, got " .. (FIRST_KIND[c] or "a number")
        else
            local ls = starts[r]
            er.error = er.error:gsub("^line %d+: ", ""):gsub("at column (%d+)", function(col)
                return "at byte " .. (ls + tonumber(col)) .. " of the body" end)
        end
        er.line = nil
    end
    return errs
end

-- the offset of a pointer from instances_as_lines in its buffer
local function offset_of(ptr) return tonumber(ptr - lines_buf) end

M.instances_as_lines = instances_as_lines
M.long_number_runs = long_number_runs
M.firsts = inst_firsts
M.starts = inst_starts
M.offset_of = offset_of
M.instance_errors = instance_errors

return M
