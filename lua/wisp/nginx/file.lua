-- wisp/nginx/file.lua — a model file's identity for hot reload (wisp_file_id_read: device, inode, size,
-- mtime, ctime), its header checksum, the pin (the file held open) that keeps the serving inode's
-- number taken, and the model repository's directories read (list_dir, is_dir, read_small).
--
-- The C library is looked up on first use: this module is loaded in nginx's master (configure{}),
-- which maps no library.

local ffi = require "ffi"

local tonumber = tonumber
local fmt, concat = string.format, table.concat

local M = {}

local C, id_buf
local function lib()
    if not C then
        C = require("wisp.base").C
        id_buf = ffi.new("int64_t[6]")
    end
    return C
end

-- the identity of the file at path now: {dev, inode, size, mtime (s, a float), mtime_text and
-- ctime_text ("s.nnnnnnnnn", exact), is_dir}, or nil when it cannot be examined (missing, a
-- dangling link). The nanosecond times stay int64 until split (a double holds 2^53).
local function ns_text(t) return fmt("%d.%09d", tonumber(t / 1000000000), tonumber(t % 1000000000)) end
local function file_id(path)
    local CL = lib()
    if CL.wisp_file_id_read(path, id_buf) ~= 0 then return nil end
    local m = id_buf[3]
    return { dev = tonumber(id_buf[0]), inode = tonumber(id_buf[1]), size = tonumber(id_buf[2]),
             mtime = tonumber(m / 1000000000) + tonumber(m % 1000000000) / 1e9, mtime_text = ns_text(m),
             ctime_text = ns_text(id_buf[4]), is_dir = id_buf[5] == 1 }
end
M.file_id = file_id

-- An entry holds its file open (read only; nothing is mapped, so it cannot SIGBUS): while the
-- inode is held the file system cannot give its number to a new file, so "the serving
-- version's inode" always means the very file that was loaded. Without the pin, a file
-- renamed in later could get the freed inode number of the serving one and be taken for an
-- in-place change of it (found by spec/nginx/soak.sh: v1 renamed back was refused for good).
-- The file opened is the one of `info` (file_stamp's, taken before the load) when the path
-- has that inode and inode change time after the open: a file renamed away and back in
-- between would have a new ctime. -> the open file, or nil (another file by now: no pin).
local function pin_file(path, info)
    local f = io.open(path, "rb")
    if not f then return nil end
    local now = file_id(path)
    if not now or now.inode ~= info.inode or now.dev ~= info.dev or now.ctime_text ~= info.ctime_text then
        f:close()
        return nil
    end
    return f
end

-- the file's header checksum (bytes 48..55 of a .wisp file) as 16 hex digits, or nil
local function header_checksum(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local h = f:read(64)
    f:close()
    if not h or #h < 56 then return nil end
    local hex = {}
    for i = 56, 49, -1 do hex[#hex + 1] = fmt("%02x", h:byte(i)) end
    return concat(hex)
end

-- A cheap identity of the file now: "ino:size:mtime", and file_id's table; nil when the file
-- is missing.
local function file_stamp(path)
    local id = file_id(path)
    if not id then return nil end
    return fmt("%d:%d:%s", id.inode, id.size, id.mtime_text), id
end
M.pin_file = pin_file
M.header_checksum = header_checksum
M.file_stamp = file_stamp

-- close a pin from pin_file
function M.unpin(f)
    if f then f:close() end
end

-- The model repository (MODELS/name/N/model.wisp): directory listings through wisp_dir_list,
-- nothing forked. One buffer, grown when a listing needs more.
local list_buf, list_cap = nil, 0
local len_box = ffi.new("size_t[1]")

-- the names in directory path (without . and ..), sorted; or nil, err
function M.list_dir(path)
    local CL = lib()
    if not list_buf then list_cap = 4096; list_buf = ffi.new("char[?]", list_cap) end
    local len
    for _ = 1, 8 do
        if CL.wisp_dir_list(path, list_buf, list_cap, len_box) ~= 0 then
            return nil, ffi.string(CL.wisp_errmsg())
        end
        len = tonumber(len_box[0])
        if len <= list_cap then break end
        list_cap = 2 * len
        list_buf = ffi.new("char[?]", list_cap)
        len = nil
    end
    if not len then return nil, path .. ": the directory kept growing while it was read" end
    local names, i = {}, 0
    while i < len do
        local name = ffi.string(list_buf + i)
        names[#names + 1] = name
        i = i + #name + 1
    end
    table.sort(names)
    return names
end

-- is path a directory (following links)?
function M.is_dir(path)
    local id = file_id(path)
    return id ~= nil and id.is_dir
end

-- the bytes of a small file (at most max bytes, default 1 MB), or nil, err
function M.read_small(path, max)
    local f, err = io.open(path, "rb")
    if not f then return nil, err end
    local s = f:read((max or 1048576) + 1)
    f:close()
    if s and #s > (max or 1048576) then return nil, path .. ": larger than " .. (max or 1048576) .. " bytes" end
    return s or ""
end

return M
