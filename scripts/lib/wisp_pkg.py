"""wisp_pkg.py — how the benchmark scripts reach wisp._capi (the binding of a built libwisp.so, read from wisp.h):
from the installed package, or, where no package is installed, the same module from this checkout.

    import wisp_pkg
    capi = wisp_pkg.capi()              # wisp._capi
    L = capi.load("build/libwisp.so")

The package (`pip install .`) is the way in; the fallback exists for machines
where pip cannot run (the GPU machine reaches no network, and `pip install
--no-build-isolation` needs setuptools and wheel there): it loads
engine/bindings/python/wisp/_capi.py itself, a module with no dependency on the rest
of the package, so there is still one binding. capi.SOURCE says which was used.
"""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def capi():
    try:
        import wisp._capi as mod
        mod.SOURCE = "package " + os.path.dirname(mod.__file__)
        return mod
    except ImportError:
        path = os.path.join(ROOT, "engine", "python", "wisp", "_capi.py")
        spec = importlib.util.spec_from_file_location("wisp_capi_checkout", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.SOURCE = "checkout " + path + " (no wisp package in this environment)"
        return mod
