-- vw.lua — Vowpal Wabbit in wisp (wisp.h section 7, engine/transform/vw_hash.c, engine/parse/vw_text.c): hashing options, VW's hashes,
-- batch:parse_vw, wisp.import_vw.
--
-- Loaded by `require "wisp"` (init.lua): wisp.vw, model:vw, wisp.vw_murmur3,
-- wisp.vw_hashstring, batch:parse_vw, wisp.import_vw and the VW class.

local ffi = require "ffi"
local base = require "wisp.base"
local batch = require "wisp.batch"
local model = require "wisp.model"

local C, wisp = base.C, base.wisp
local ffi_gc, ffi_str = ffi.gc, ffi.string
local type, tonumber, setmetatable, getmetatable = type, tonumber, setmetatable, getmetatable
local argerror, expected, handle, check_uint = base.argerror, base.expected, base.handle, base.check_uint
local check_dtype, last_error = base.check_dtype, base.last_error
local vw_box, size_box, u64_box = base.vw_box, base.size_box, base.u64_box
local Batch, Model, growable, text_args = batch.Batch, model.Model, batch.growable, batch.text_args

local VW = {}; VW.__index = VW
wisp.VW = VW
base.register(VW, "vw")

local M = { VW = VW }

local function new_vw_object(h)
    return setmetatable({ _h = ffi_gc(h, C.wisp_vw_free) }, VW)
end

-- wisp.vw([options]) -> VW hashing options from VW's command-line spelling
-- ("-b 18 -q ab --hash_seed 7 --noconstant"), or nil, err for an option
-- wisp does not support.
function wisp.vw(options)
    if options ~= nil and type(options) ~= "string" then expected(1, 1, "vw", "string", options) end
    local rc = C.wisp_vw_new(options, vw_box)
    if rc ~= 0 then return nil, last_error(rc, "vw") end
    return new_vw_object(vw_box[0])
end

-- model:vw() -> the hashing options kept in a model made by wisp.import_vw, or nil, err.
function Model:vw()
    local h = handle(self, Model, "model", "vw")
    local rc = C.wisp_vw_from_model(h, vw_box)
    if rc ~= 0 then return nil, last_error(rc, "vw") end
    return new_vw_object(vw_box[0])
end

function VW:options() return ffi_str(C.wisp_vw_options(handle(self, VW, "vw", "options"))) end
function VW:bits() return tonumber(C.wisp_vw_bits(handle(self, VW, "vw", "bits"))) end

-- vw:hash_namespace(name) -> the namespace's hash ("" or " ": the default namespace)
function VW:hash_namespace(name)
    local h = handle(self, VW, "vw", "hash_namespace")
    if type(name) ~= "string" then expected(1, 1, "hash_namespace", "string", name) end
    return tonumber(C.wisp_vw_hash_namespace(h, name, #name))
end

-- vw:hash_feature(name, ns_hash) -> the feature's weight index (masked to the bits)
function VW:hash_feature(name, ns_hash)
    local h = handle(self, VW, "vw", "hash_feature")
    if type(name) ~= "string" then expected(1, 1, "hash_feature", "string", name) end
    ns_hash = check_uint(1, 2, "hash_feature", ns_hash, "ns_hash", 0)
    return tonumber(C.wisp_vw_hash_feature(h, name, #name, ns_hash))
end

-- vw:hash_quadratic(h1, h2) -> the index of the quadratic feature of two hashes
function VW:hash_quadratic(h1, h2)
    local h = handle(self, VW, "vw", "hash_quadratic")
    h1 = check_uint(1, 1, "hash_quadratic", h1, "h1", nil)
    h2 = check_uint(1, 2, "hash_quadratic", h2, "h2", nil)
    if h1 == nil or h2 == nil then argerror(1, h1 == nil and 1 or 2, "hash_quadratic", "hash expected, got nil") end
    return tonumber(C.wisp_vw_hash_quadratic(h, h1, h2))
end

function VW:close()
    if getmetatable(self) ~= VW then handle(self, VW, "vw", "close") end
    local h = self._h
    if h == nil then return end
    self._h = nil
    ffi_gc(h, nil)
    C.wisp_vw_free(h)
end

function VW:is_closed() return self._h == nil end

-- wisp.vw_murmur3(s[, seed]) and wisp.vw_hashstring(s[, seed]): VW's hashes of a string.
function wisp.vw_murmur3(s, seed)
    if type(s) ~= "string" then expected(1, 1, "vw_murmur3", "string", s) end
    return tonumber(C.wisp_vw_murmur3(s, #s, check_uint(1, 2, "vw_murmur3", seed, "seed", 0)))
end

function wisp.vw_hashstring(s, seed)
    if type(s) ~= "string" then expected(1, 1, "vw_hashstring", "string", s) end
    return tonumber(C.wisp_vw_hashstring(s, #s, check_uint(1, 2, "vw_hashstring", seed, "seed", 0)))
end

-- batch:parse_vw(vw, text[, {final=true, max_rows=0, line=0}])
-- batch:parse_vw(vw, ptr, len[, opts])        (text in FFI memory)
-- Appends the rows of Vowpal Wabbit text hashed under vw (wisp.vw or
-- model:vw()); the contract of parse_libsvm: returns rows_added, bytes
-- consumed and the line count after them, or nil, err. Malformed lines
-- become bad rows (see bad_rows), scored as NaN.
function Batch:parse_vw(vw, text, a3, a4)
    local h = growable(self, "parse_vw")
    if getmetatable(vw) ~= VW then expected(1, 1, "parse_vw", "vw options (wisp.vw or model:vw())", vw) end
    local vh = vw._h
    if vh == nil then argerror(1, 1, "parse_vw", "the vw options are closed") end
    local len, final, max_rows
    text, len, final, max_rows = text_args("parse_vw", 2, text, a3, a4)
    local before = C.wisp_batch_rows(h)
    local rc = C.wisp_batch_parse_vw(h, vh, text, len, final, max_rows, u64_box, size_box)
    if rc ~= 0 then return nil, last_error(rc, "parse_vw") end
    return tonumber(C.wisp_batch_rows(h) - before), tonumber(size_box[0]), tonumber(u64_box[0])
end

-- wisp.import_vw(src, dst[, dtype]) -> true or nil, err: a VW --readable_model
-- or --invert_hash file as a .wisp model (see `wisp import vw --help`).
wisp.import_vw = model.importer("import_vw", C.wisp_import_vw)

return M
