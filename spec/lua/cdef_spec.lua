-- cdef_spec.lua — the FFI declarations and Lua constants agree with engine/include/wisp.h; the library loader's search order.
local H = require "helpers"

local HEADER = "engine/include/wisp.h"

local function strip_comments(s)
    s = s:gsub("/%*.-%*/", " ")
    s = s:gsub("//[^\n]*", " ")
    return s
end

-- Evaluate a C integer constant expression of wisp.h: 0x.., 12u, (1u << 26), -3.
local function c_value(expr)
    local e = expr:gsub("%s+", "")
    e = e:gsub("^%((.*)%)$", "%1")
    local function num(t)
        t = t:gsub("[uUlL]+$", "")
        return tonumber(t)
    end
    local a, b = e:match("^([%w]+)<<([%w]+)$")
    if a then return num(a) * 2 ^ num(b) end
    return num(e)
end

-- name -> value of every enum constant and numeric #define in the header.
local function header_constants(text)
    local consts = {}
    for name, expr in text:gmatch("#define%s+(WISP_[%w_]+)%s+([^\n]+)") do
        local v = c_value(strip_comments(expr))
        if v then consts[name] = v end
    end
    local body = strip_comments(text)
    for block in body:gmatch("enum%s*{(.-)}") do
        local next_value = 0
        for item in (block .. ","):gmatch("([^,]+),") do
            local name, expr = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
            if not name then name = item:match("^%s*([%w_]+)%s*$") end
            if name then
                local v = expr and c_value(expr) or next_value
                if expr and item:find("<<") then
                    local a, b = expr:match("(%d+)u?%s*<<%s*(%d+)")
                    v = tonumber(a) * 2 ^ tonumber(b)
                end
                assert(v, "cannot evaluate " .. item)
                consts[name] = v
                next_value = v + 1
            end
        end
    end
    return consts
end

-- Normalized prototypes "ret name(params)" of every wisp_* function in C text.
local function prototypes(text)
    local body = strip_comments(text)
    body = body:gsub("#[^\n]*", " ")
    body = body:gsub("typedef%s+enum%s*{.-}%s*[%w_]+%s*;", " ")
    body = body:gsub("enum%s*{.-}%s*;", " ")
    body = body:gsub('extern%s+"C"%s*{', " ")
    local protos = {}
    for stmt in body:gmatch("([^;{}]+);") do
        stmt = stmt:gsub("%s+", " "):gsub("^ ", ""):gsub(" $", "")
        local name = stmt:match("(wisp_[%w_]+)%s*%(")
        if name and not stmt:find("^typedef") then
            local norm = stmt:gsub("%s*([%*%(%),])%s*", "%1")
            protos[name] = norm
        end
    end
    return protos
end

describe("wisp.cdef", function()
    local header = H.read_file(HEADER)

    it("loads the library and returns its namespace", function()
        local C = require "wisp.cdef"
        local ffi = require "ffi"
        assert.equal("0.1.0", ffi.string(C.wisp_version()))
    end)

    it("declares every function of wisp.h, with the header's prototype", function()
        local want = prototypes(header)
        local cdef_src = H.read_file("lua/wisp/cdef.lua")
        local decl = cdef_src:match("ffi%.cdef%s*%[%[(.-)%]%]")
        assert.is_truthy(decl, "no ffi.cdef block in lua/wisp/cdef.lua")
        local got = prototypes(decl)
        local n = 0
        for name, proto in pairs(want) do
            n = n + 1
            assert.equal(proto, got[name], "prototype of " .. name)
        end
        for name in pairs(got) do
            assert.is_truthy(want[name], name .. " is declared in cdef.lua but not in wisp.h")
        end
        assert.is_true(n >= 59, "found only " .. n .. " prototypes in wisp.h")
        -- and each resolves in the loaded library
        local C = require "wisp.cdef"
        for name in pairs(want) do
            local ok, err = pcall(function() return C[name] end)
            assert.is_true(ok, "symbol " .. name .. ": " .. tostring(err))
        end
    end)

    it("declares no struct layouts", function()
        local decl = H.read_file("lua/wisp/cdef.lua"):match("ffi%.cdef%s*%[%[(.-)%]%]")
        for body in decl:gmatch("struct%s+[%w_]+%s*(%b{})") do
            error("cdef.lua declares a struct body: " .. body)
        end
        assert.is_nil(decl:find("struct%s+[%w_]*%s*{"))
    end)

    it("has every numeric constant of wisp.h, with the header's value", function()
        local K = require "wisp.const"
        local consts = header_constants(header)
        local n = 0
        for name, v in pairs(consts) do
            n = n + 1
            assert.equal(v, K[name], name)
        end
        for name, v in pairs(K) do
            assert.equal(consts[name], v, name .. " is in wisp/const.lua but not (with that value) in wisp.h")
        end
        assert.is_true(n >= 47, "parsed only " .. n .. " constants")
        -- spot checks that the header parser itself is right
        assert.equal(-11, consts.WISP_ESTATE)
        assert.equal(16, consts.WISP_STAT_COUNT)
        assert.equal(2 ^ 26, consts.WISP_MAX_ROWS)
        assert.equal(2, consts.WISP_I8)
    end)

    it("agrees with the library's own names for statistics, dtypes and statuses", function()
        local C = require "wisp.cdef"
        local K = require "wisp.const"
        local ffi = require "ffi"
        for name, v in pairs(K) do
            if name:match("^WISP_STAT_") and name ~= "WISP_STAT_COUNT" then
                assert.equal(name:sub(11):lower(), ffi.string(C.wisp_stat_name(v)))
            elseif name:match("^WISP_E") or name == "WISP_OK" then
                assert.equal(name, ffi.string(C.wisp_err_name(v)))
            end
        end
        assert.is_true(C.wisp_stat_name(K.WISP_STAT_COUNT) == nil)
        assert.equal("f32", ffi.string(C.wisp_dtype_name(K.WISP_F32)))
        assert.equal("f16", ffi.string(C.wisp_dtype_name(K.WISP_F16)))
        assert.equal("i8", ffi.string(C.wisp_dtype_name(K.WISP_I8)))
    end)

    describe("library search", function()
        local libpath = os.getenv("WISP_LIB")
        local preamble = 'package.path = "lua/?.lua;lua/?/init.lua;" .. package.path\n'

        it("takes $WISP_LIB, and fails naming it when it does not load", function()
            local out, ok = H.luajit(preamble .. 'require "wisp.cdef"', "WISP_LIB=/nonexistent/libwisp.so")
            assert.is_false(ok)
            assert.matches("WISP_LIB", out)
            assert.matches("/nonexistent/libwisp.so", out, 1, true)
        end)

        it("finds ../../build/libwisp.so next to the modules, and lists what it tried when nothing is there", function()
            local dir = H.tmpname()
            os.remove(dir)
            finally(function() os.execute(("rm -rf %s"):format(dir)) end)
            assert(os.execute(("mkdir -p %s/lua/wisp %s/build && cp lua/wisp/*.lua %s/lua/wisp/"):format(dir, dir, dir)) == 0)
            local code = 'package.path = "' .. dir .. '/lua/?.lua;' .. dir .. '/lua/?/init.lua;" .. package.path\n'
                .. 'local wisp = require "wisp"\nprint("version " .. wisp.version())\n'
            -- nothing there (unless installed system-wide): the error lists the search
            local out, ok = H.luajit(code, "env -u WISP_LIB LD_LIBRARY_PATH=")
            if not ok then
                assert.matches("ffi.C", out, 1, true)
                assert.matches(dir .. "/lua/wisp/../../build/libwisp.so (no such file)", out, 1, true)
                assert.matches("WISP_LIB", out, 1, true)
            end
            if libpath then
                assert(os.execute(("cp %s %s/build/libwisp.so"):format(libpath, dir)) == 0)
                out, ok = H.luajit(code, "env -u WISP_LIB")
                assert.is_true(ok, out)
                assert.matches("version 0.1.0", out, 1, true)
            end
        end)

        it("uses ffi.C when the process already exports the symbols", function()
            if not libpath then return pending("WISP_LIB not set") end
            local out, ok = H.luajit(preamble .. 'print(require("wisp.cdef") == require("ffi").C)',
                                     "LD_PRELOAD=" .. libpath)
            assert.is_true(ok, out)
            assert.matches("true", out)
        end)
    end)

    it("uses the symbols of the wisp CLI inside `wisp run`", function()
        -- the CLI: $WISP_CLI, else `wisp` next to $WISP_LIB, else build/wisp
        local cli = os.getenv("WISP_CLI")
        local lib = os.getenv("WISP_LIB")
        if not cli and lib then cli = lib:gsub("[^/]*$", "") .. "wisp" end
        if not (cli and H.file_exists(cli)) then cli = "build/wisp" end
        if not H.file_exists(cli) then return pending("no wisp CLI built") end
        local script = H.tmpname(".lua")
        H.write_file(script, 'local ffi = require "ffi"\n'
            .. 'print("same " .. tostring(require("wisp.cdef") == ffi.C) .. " " .. require("wisp").version())\n')
        local p = io.popen(("env -u WISP_LIB %s run %s 2>&1"):format(cli, script))
        local out = p:read("*a")
        p:close()
        assert.matches("same true 0.1.0", out, 1, true)
    end)

    it("can be loaded twice in one Lua state", function()
        package.loaded["wisp.cdef"] = nil
        local C2 = require "wisp.cdef"
        assert.is_truthy(C2.wisp_version)
    end)

    after_each(H.cleanup)
end)
