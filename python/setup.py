"""Builds the extension module snapkv._snapkv with CMake (python/CMakeLists.txt).

    pip install ./python --no-build-isolation        # from a checkout, no network

Against the checkout's sources by default (the library linked into the module); with
SNAPKV_PREFIX=<prefix of `cmake --install`> against that installed library instead. Extra CMake
arguments: CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache ...". Build jobs: SNAPKV_JOBS.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def version():
    text = (HERE.parent / "CMakeLists.txt").read_text()
    return re.search(r"project\(snapkv VERSION ([0-9.]+)", text).group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build = Path(self.build_temp).resolve() / "cmake"
        args = [
            f"-DSNAPKV_PYTHON_OUTPUT_DIR={out}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        prefix = os.environ.get("SNAPKV_PREFIX")
        if prefix:
            args += ["-DSNAPKV_PYTHON_USE_INSTALLED=ON", f"-DCMAKE_PREFIX_PATH={prefix}"]
        args += shlex.split(os.environ.get("CMAKE_ARGS", ""))
        jobs = os.environ.get("SNAPKV_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "-S", str(HERE), "-B", str(build), *args])
        subprocess.check_call(["cmake", "--build", str(build), "--target", "_snapkv", "-j", jobs])


setup(
    version=version(),
    packages=["snapkv"],
    package_data={"snapkv": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("snapkv._snapkv")],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
