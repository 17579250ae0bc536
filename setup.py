"""setup.py — builds the wisp engine (through the Makefile) and the CPython extension wisp._wisp over it.

`pip install .` / `pip wheel .` run build_ext below:
  1. `make BUILD=<build dir>/c <build dir>/c/libwisp.a`: the engine's C sources
     (engine/*.c except the CLI) and, when nvcc is found as the Makefile finds
     it, the CUDA kernels; without nvcc engine/cuda/cuda_stub.c (CPU only). The
     Makefile stays the one description of how the engine is compiled.
  2. engine/bindings/python/wisp/_wisp*.c (which include wisp.h only) are linked with
     libwisp.a statically, its symbols hidden (--exclude-libs), so the module
     has no runtime dependency but libxxhash and libc (and links the CUDA
     runtime statically, as the CLI does).
Stable ABI: on CPython >= 3.11 the module is built with Py_LIMITED_API=3.11
(the buffer protocol joined the limited API in 3.11) and the wheel is tagged
cp311-abi3: one wheel for 3.11, 3.12, 3.13, ... Older interpreters get a
version-specific build of the same source.

Environment:
  WISP_NVCC=path|""   the nvcc to build the CUDA backend with ("" = CPU only);
                      default: nvcc on PATH or /usr/local/cuda/bin/nvcc
  WISP_PY_BUILD=dir   setuptools' build directory (default build-py; never
                      build/, which the Makefile owns)
  WISP_JOBS=N         parallel make jobs (default: the CPU count)
"""
import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD_BASE = os.environ.get("WISP_PY_BUILD", "build-py")
LIMITED = sys.version_info >= (3, 11)
LDLIBS = ["xxhash", "m", "pthread", "dl", "rt"]   # the Makefile's LDLIBS


def find_nvcc():
    if "WISP_NVCC" in os.environ:
        return os.environ["WISP_NVCC"]
    nvcc = shutil.which("nvcc")
    if not nvcc and os.access("/usr/local/cuda/bin/nvcc", os.X_OK):
        nvcc = "/usr/local/cuda/bin/nvcc"
    return nvcc or ""


def check_xxhash(cc):
    """Fail early, in words, when libxxhash's header or library is missing."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.c")
        with open(src, "w") as f:
            f.write("#include <xxhash.h>\nint main(void){return (int)XXH64(\"\",0,0);}\n")
        r = subprocess.run([cc, src, "-o", os.path.join(d, "t"), "-lxxhash"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            sys.exit("wisp: building needs libxxhash (header and library): apt-get install libxxhash-dev "
                     "(`make deps-build` installs it)\n" + r.stdout.decode(errors="replace"))


class build_wisp_ext(build_ext):
    def build_extension(self, ext):
        cc = os.environ.get("CC", "cc")
        check_xxhash(cc)
        cbuild = os.path.abspath(os.path.join(self.build_temp, "c"))
        os.makedirs(cbuild, exist_ok=True)
        nvcc = find_nvcc()
        jobs = os.environ.get("WISP_JOBS") or str(os.cpu_count() or 1)
        cmd = ["make", "-C", ROOT, "-j" + jobs, "BUILD=" + cbuild, "NVCC=" + nvcc, cbuild + "/libwisp.a"]
        print("wisp: " + " ".join(cmd), flush=True)
        # run from `make test`, the outer make's MAKEFLAGS would carry its
        # BUILD/NVCC overrides and jobserver into this make: start clean
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
        subprocess.check_call(cmd, env=env)
        ext.extra_objects = [cbuild + "/libwisp.a"]
        # relink when the engine changed, not only when the module's own sources did
        ext.depends = [d for d in ext.depends if not d.endswith("libwisp.a")] + [cbuild + "/libwisp.a"]
        ext.libraries = list(LDLIBS)
        if nvcc:
            cuda = os.path.dirname(os.path.dirname(nvcc))
            ext.library_dirs = [cuda + "/lib64", cuda + "/targets/x86_64-linux/lib"]
            ext.libraries = ["cudart_static", "stdc++"] + ext.libraries
        super().build_extension(ext)


ext = Extension(
    "wisp._wisp",
    sources=["engine/bindings/python/wisp/_wisp.c", "engine/bindings/python/wisp/_wisp_session.c",
             "engine/bindings/python/wisp/_wisp_score.c", "engine/bindings/python/wisp/_wisp_raw.c",
             "engine/bindings/python/wisp/_wisp_dlpack.c"],
    depends=["engine/bindings/python/wisp/_wisp.h"],
    include_dirs=["engine/include"],                  # wisp.h only: never the engine's private headers
    define_macros=[] if LIMITED else [("WISP_NO_LIMITED_API", "1")],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
    extra_link_args=["-Wl,--exclude-libs,ALL", "-pthread"],
    py_limited_api=LIMITED,
)

os.makedirs(BUILD_BASE, exist_ok=True)
options = {"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}}
if LIMITED:
    options["bdist_wheel"] = {"py_limited_api": "cp311"}

setup(
    package_dir={"": "engine/bindings/python"},
    packages=["wisp"],
    exclude_package_data={"wisp": ["*.c"]},
    ext_modules=[ext],
    cmdclass={"build_ext": build_wisp_ext},
    options=options,
    zip_safe=False,
)
