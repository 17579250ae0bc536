-- nginx_configure_spec.lua — wisp.nginx outside nginx: configure (it only records options: the modes and admin rules it accepts, the errors it raises for the rest) and the {"instances"} scanner that hands every JSON body of a columns model to the C parser.
local N = require "wisp.nginx"

describe("wisp.nginx.configure", function()
    it("accepts every mode, device (the default) among them, and the cpu_mode and gpu_mode device picks from (spec/nginx checks the pick)", function()
        for _, mode in ipairs { "device", "inline", "thread", "async", "auto" } do
            assert.is_true(N.configure { models = "m=/srv/m.wisp", mode = mode })
        end
        assert.is_true(N.configure { models = "m=/srv/m.wisp" })
        assert.is_true(N.configure { models = "m=/srv/m.wisp", cpu_mode = "thread", gpu_mode = "inline" })
    end)

    it("refuses an unknown mode, a default that is not a mode, and an unknown option, naming them", function()
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", mode = "fast" } end,
            "wisp.nginx.configure: mode: device, inline, thread, async or auto expected, got fast")
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", gpu_mode = "device" } end,
            "wisp.nginx.configure: gpu_mode: inline, thread, async or auto expected, got device")
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", cpu_mode = 3 } end,
            "wisp.nginx.configure: cpu_mode: inline, thread, async or auto expected, got 3")
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", modes = "inline" } end,
            "wisp.nginx.configure: unknown option 'modes'")
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", thread_slots = "many" } end,
            "wisp.nginx.configure: thread_slots: number expected")
    end)

    it("accepts admin = open (the default) or separate, and refuses anything else", function()
        assert.is_true(N.configure { models = "m=/srv/m.wisp", admin = "separate" })
        assert.is_true(N.configure { models = "m=/srv/m.wisp", admin = "open" })
        assert.has_error(function() N.configure { models = "m=/srv/m.wisp", admin = "deny" } end,
            "wisp.nginx.configure: admin: open or separate expected, got deny")
    end)
end)

describe("wisp.nginx {\"instances\"} scanner", function()
    local scan = N._instances_as_lines

    it("makes each instance a line, whatever its strings and nesting hold", function()
        local lines, n, extra = scan('{"instances": [{"a": "x,]}\\"{"}, {"b": [1, {"c": 2}]},\n {"d":\n 3}]}')
        assert.equal('{"a": "x,]}\\"{"}\n {"b": [1, {"c": 2}]}\n  {"d":  3}', lines)
        assert.equal(3, n)
        assert.is_false(extra)
    end)

    it("finds the instances among other keys (before or after, an escaped key name too)", function()
        local lines, n, extra = scan('{"signature_name": "serving_default", "instances": [{"a": 1}], "x": {"y": [1, "]"]}}')
        assert.equal('{"a": 1}', lines); assert.equal(1, n); assert.is_true(extra)
        lines, n = scan('{"instanc\\u0065s": [{"a": 1}, {"a": 2}]}')
        assert.equal('{"a": 1}\n {"a": 2}', lines); assert.equal(2, n)
        lines, n = scan('{"instances": []}')
        assert.equal('', lines); assert.equal(0, n)
    end)

    it("keeps instances that are not objects as lines (the C parser makes them bad rows)", function()
        local lines, n = scan('{"instances": [1, "x", null, [1, 2], -2.5e3]}')
        assert.equal('1\n "x"\n null\n [1, 2]\n -2.5e3', lines)
        assert.equal(5, n)
    end)

    it("refuses (nil: cjson then says why) what is not one object with one instances list", function()
        for _, body in ipairs { '{"instances": [{"a": 1},]}', '{"instances": [,{"a": 1}]}', '{"instances": [{"a": 1} {"b": 2}]}',
                                '{"instances": [1 2]}', '{"instances": [{"a": 1}], "instances": [{"a": 2}]}',
                                '[{"a": 1}]', '{"rows": [{"a": 1}]}', '{"instances": {"a": 1}}', '{"instances": [{"a": 1}]} x',
                                '{"instances": [{"a": "unterminated}]}', '{"instances": [{"a": 1}]', '' } do
            assert.is_nil(scan(body), body)
        end
    end)
end)

describe("wisp.nginx answers stay UTF-8", function()
    it("keeps valid UTF-8 and replaces each byte that starts no valid sequence with U+FFFD", function()
        local clean = N._utf8_clean
        assert.equal("plain ascii", clean("plain ascii"))
        assert.equal("\195\169t\195\169 \226\130\172 \240\159\152\128", clean("\195\169t\195\169 \226\130\172 \240\159\152\128"))
        assert.equal("ct\239\191\189r", clean("ct\255r"))
        assert.equal("\239\191\189\239\191\189", clean("\192\175"))                -- an overlong '/'
        assert.equal("\239\191\189\239\191\189\239\191\189", clean("\237\160\128"))   -- a UTF-16 surrogate
        assert.equal("a\239\191\189\239\191\189", clean("a\226\130"))          -- cut short: each byte
    end)
end)
