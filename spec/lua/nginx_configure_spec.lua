-- nginx_configure_spec.lua — wisp.nginx.configure outside nginx (it only records options): the modes it accepts, what the default mode may pick, and the errors it raises for the rest.
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
end)
