"""pip install --no-build-isolation ./python: the tessera package, built from
this tree's `make build` output (libtessera.a and the public headers), with
Debian's setuptools and pybind11 only; nothing is fetched.

TESSERA_BUILD names another build directory (default: ../build)."""
import os
import re

from setuptools import Extension, setup

try:  # Debian's python3-pybind11; else pybind11-dev's headers
    import pybind11

    PYBIND11_INCLUDE = pybind11.get_include()
except ImportError:
    PYBIND11_INCLUDE = "/usr/include"

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.abspath(os.environ.get("TESSERA_BUILD", os.path.join(ROOT, "build")))
LIB = os.path.join(BUILD, "lib", "libtessera.a")
PC = os.path.join(BUILD, "cmake", "tessera.pc")
if not (os.path.exists(LIB) and os.path.exists(PC)):
    raise SystemExit(f"setup.py: {LIB} or {PC} is missing: run `make build` first (or set TESSERA_BUILD)")
with open(PC) as f:
    pc = f.read()
# What libtessera.a needs besides itself (the pkg-config file's Libs.private).
private = re.search(r"^Libs\.private:(.*)$", pc, re.M).group(1).split()
version = re.search(r"^Version:\s*(\S+)", pc, re.M).group(1)

setup(
    name="tessera",
    version=version,
    description="Tessera: compile ONNX models into schedules of fine-grained tasks and run them",
    packages=["tessera"],
    ext_modules=[
        Extension(
            "tessera._tessera",
            ["_tessera.cc"],
            include_dirs=[os.path.join(ROOT, "include"), PYBIND11_INCLUDE],
            extra_compile_args=["-std=c++20", "-O2", "-fvisibility=hidden"],
            extra_objects=[LIB],
            extra_link_args=private,
            language="c++",
        )
    ],
)
