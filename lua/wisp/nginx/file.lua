-- wisp/nginx/file.lua — a model file's identity for hot reload: stat(2) (inode, size, mtime), the
-- header checksum, and the pin (the file held open) that keeps the serving inode's number taken;
-- and the model repository's directories read (list_dir, is_dir, read_small).

local ffi = require "ffi"

local tonumber, pcall = tonumber, pcall
local fmt, concat = string.format, table.concat

local M = {}

-- file identity: inode, size, mtime (ns), from stat(2) (the x86_64 Linux struct layout;
-- elsewhere the file's header checksum, read each check, is the identity)
local stat_ok = ffi.arch == "x64" and ffi.os == "Linux" and pcall(ffi.cdef, [[
struct wisp_ngx_stat { uint64_t dev, ino, nlink; uint32_t mode, uid, gid, pad0; uint64_t rdev;
                       int64_t size, blksize, blocks; int64_t atime, atime_ns, mtime, mtime_ns,
                       ctime, ctime_ns; int64_t reserved[3]; };
int wisp_ngx_stat_fn(const char *path, struct wisp_ngx_stat *st) __asm__("stat");
int wisp_ngx_fstat_fn(int fd, struct wisp_ngx_stat *st) __asm__("fstat");
int wisp_ngx_open_fn(const char *path, int flags) __asm__("open");
int wisp_ngx_close_fn(int fd) __asm__("close");
]])
local stbuf = stat_ok and ffi.new("struct wisp_ngx_stat") or nil
if stat_ok and not pcall(function() return ffi.C.wisp_ngx_stat_fn end) then stat_ok = false end
local pin_ok = stat_ok and pcall(function() return ffi.C.wisp_ngx_fstat_fn, ffi.C.wisp_ngx_open_fn, ffi.C.wisp_ngx_close_fn end)

-- An entry holds its file open (O_RDONLY; nothing is mapped, so it cannot SIGBUS): while the
-- inode is held the file system cannot give its number to a new file, so "the serving
-- version's inode" always means the very file that was loaded. Without the pin, a file
-- renamed in later could get the freed inode number of the serving one and be taken for an
-- in-place change of it (found by spec/nginx/soak.sh: v1 renamed back was refused for good).
local function pin_file(path, ino)
    if not pin_ok then return nil end
    local fd = ffi.C.wisp_ngx_open_fn(path, 0x80000)          -- O_RDONLY | O_CLOEXEC
    if fd < 0 then return nil end
    if ffi.C.wisp_ngx_fstat_fn(fd, stbuf) ~= 0 or tonumber(stbuf.ino) ~= ino then
        ffi.C.wisp_ngx_close_fn(fd)                            -- another file by now: no pin
        return nil
    end
    return fd
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

-- A cheap identity of the file now: "ino:size:mtime_ns" (or the header checksum
-- when stat is not usable); nil when the file is missing.
local function file_stamp(path)
    if stat_ok then
        if ffi.C.wisp_ngx_stat_fn(path, stbuf) ~= 0 then return nil end
        return fmt("%d:%d:%d.%09d", tonumber(stbuf.ino), tonumber(stbuf.size), tonumber(stbuf.mtime),
                   tonumber(stbuf.mtime_ns)), {
            inode = tonumber(stbuf.ino), dev = tonumber(stbuf.dev), size = tonumber(stbuf.size),
            mtime = tonumber(stbuf.mtime) + tonumber(stbuf.mtime_ns) / 1e9 }
    end
    local c = header_checksum(path)
    return c, c and {} or nil
end
M.pin_file = pin_file
M.header_checksum = header_checksum
M.file_stamp = file_stamp

-- close a pin from pin_file
function M.unpin(fd)
    if fd then ffi.C.wisp_ngx_close_fn(fd) end
end

-- The model repository (MODELS/name/N/model.wisp): directory listings through opendir(3)
-- and readdir(3) (glibc's struct dirent on x86_64 Linux: d_name at byte 19), nothing forked.
local dir_ok = stat_ok and pcall(ffi.cdef, [[
typedef struct wisp_ngx_dir wisp_ngx_dir;
wisp_ngx_dir *wisp_ngx_opendir_fn(const char *path) __asm__("opendir");
const uint8_t *wisp_ngx_readdir_fn(wisp_ngx_dir *d) __asm__("readdir");
int wisp_ngx_closedir_fn(wisp_ngx_dir *d) __asm__("closedir");
const char *wisp_ngx_strerror_fn(int errnum) __asm__("strerror");
]]) and pcall(function() return ffi.C.wisp_ngx_opendir_fn, ffi.C.wisp_ngx_readdir_fn, ffi.C.wisp_ngx_closedir_fn end)
M.dir_ok = dir_ok

-- the names in directory path (without . and ..), sorted; or nil, err
function M.list_dir(path)
    if not dir_ok then return nil, "listing directories needs x86_64 Linux (opendir/readdir through the FFI)" end
    local d = ffi.C.wisp_ngx_opendir_fn(path)
    if d == nil then return nil, path .. ": cannot open the directory (" .. ffi.string(ffi.C.wisp_ngx_strerror_fn(ffi.errno())) .. ")" end
    local names = {}
    while true do
        local ent = ffi.C.wisp_ngx_readdir_fn(d)
        if ent == nil then break end
        local name = ffi.string(ent + 19)
        if name ~= "." and name ~= ".." then names[#names + 1] = name end
    end
    ffi.C.wisp_ngx_closedir_fn(d)
    table.sort(names)
    return names
end

-- is path a directory (stat(2), following links)?
function M.is_dir(path)
    if not stat_ok then return false end
    if ffi.C.wisp_ngx_stat_fn(path, stbuf) ~= 0 then return false end
    return bit.band(tonumber(stbuf.mode), 0xF000) == 0x4000
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
