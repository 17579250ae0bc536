-- busted.lua — runs busted under the interpreter that runs this file (LuaJIT), with lua/ on the path.
package.path = "lua/?.lua;lua/?/init.lua;spec/lua/?.lua;" .. package.path
require("busted.runner")({ standalone = false })
