"""Builds the offloadkit Python package: the pure-Python sources of python/offloadkit, plus the
extension module offloadkit._native, the driver-call interposer and the offloadkit program (the
package's `offloadkit` command hands it the commands that do not run in Python) built by this
project's own CMake build (targets offloadkit_python_module, offloadkit_interpose and offloadkit,
nothing else).

Environment:
- OFFLOADKIT_CMAKE_BUILD_DIR: an existing build folder configured from this checkout (`bash ci/main`
  or `bash ci/test` make build/): the two targets are brought up to date there instead of
  configuring a fresh build (the tests use it, so that an install takes seconds). Its Python must
  be this interpreter's version.
- OFFLOADKIT_CMAKE_ARGS: more arguments for a fresh configure (e.g. -DCMAKE_CUDA_ARCHITECTURES=90).
- CUDA_HOME or CUDACXX: where nvcc is, when it is not in /usr/local/cuda.
"""

import importlib.machinery
import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["offloadkit_python_module", "offloadkit_interpose", "offloadkit"]
INTERPOSER = "liboffloadkit_interpose.so"
PROGRAM = "offloadkit"


def project_version():
    """The version in CMakeLists.txt's project(), the one source of it."""
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(offloadkit VERSION ([0-9.]+)", f.read())
    if m is None:
        raise RuntimeError("CMakeLists.txt has no `project(offloadkit VERSION x.y.z ...)`")
    return m.group(1)


class CMakeBuildError(RuntimeError):
    """A step of the CMake build failed; the message names the command."""


class cmake_build_ext(build_ext):
    """Builds offloadkit._native with CMake and copies it, the interposer and the program into
    the package."""

    def run(self):
        for ext in self.extensions:
            self.build_cmake(ext)

    def _run(self, cmd, env=None):
        print("offloadkit: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
        rc = subprocess.call(cmd, env=env)
        if rc != 0:
            raise CMakeBuildError(f"`{' '.join(cmd)}` failed with exit status {rc}")

    def _environment(self):
        env = dict(os.environ)
        if "CUDACXX" not in env:
            for home in [env.get("CUDA_HOME", ""), "/usr/local/cuda", "/usr/local/cuda-13.0",
                         "/opt/cuda"]:
                if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
                    env["CUDACXX"] = os.path.join(home, "bin", "nvcc")
                    break
        return env

    def build_cmake(self, ext):
        env = self._environment()
        build_dir = os.environ.get("OFFLOADKIT_CMAKE_BUILD_DIR", "")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
            if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
                raise CMakeBuildError(f"OFFLOADKIT_CMAKE_BUILD_DIR={build_dir} is not a "
                                      "configured CMake build folder (no CMakeCache.txt)")
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            os.makedirs(build_dir, exist_ok=True)
            configure = ["cmake", "-S", ROOT, "-B", build_dir,
                         "-DCMAKE_BUILD_TYPE=Release",
                         "-DOFFLOADKIT_BUILD_TESTS=OFF", "-DOFFLOADKIT_BUILD_BENCHMARKS=OFF",
                         "-DOFFLOADKIT_PYTHON_MODULE=ON",
                         f"-DPython3_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            configure += shlex.split(os.environ.get("OFFLOADKIT_CMAKE_ARGS", ""))
            self._run(configure, env)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        self._run(["cmake", "--build", build_dir, "-j", jobs, "--target"] + TARGETS, env)

        # The module is built for the Python of the CMake build: it must be this one.
        suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
        built = os.path.join(build_dir, "python", "offloadkit", "_native" + suffix)
        if not os.path.isfile(built):
            found = [n for n in os.listdir(os.path.join(build_dir, "python", "offloadkit"))
                     if n.startswith("_native.")] if os.path.isdir(
                         os.path.join(build_dir, "python", "offloadkit")) else []
            raise CMakeBuildError(
                f"the CMake build in {build_dir} made no {'_native' + suffix} for this Python "
                f"({sys.executable}, {sys.version.split()[0]}); it has {found or 'none'}: "
                "configure it with -DPython3_EXECUTABLE set to this interpreter")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)
        lib_dir = os.path.join(os.path.dirname(target), "lib")
        os.makedirs(lib_dir, exist_ok=True)
        interposer = os.path.join(build_dir, "interpose", INTERPOSER)
        if not os.path.isfile(interposer):
            raise CMakeBuildError(f"the CMake build in {build_dir} made no {interposer}")
        shutil.copyfile(interposer, os.path.join(lib_dir, INTERPOSER))
        # The program beside lib/, so that it finds the interposer in <prefix>/lib.
        program = os.path.join(build_dir, "tools", PROGRAM)
        if not os.path.isfile(program):
            raise CMakeBuildError(f"the CMake build in {build_dir} made no {program}")
        bin_dir = os.path.join(os.path.dirname(target), "bin")
        os.makedirs(bin_dir, exist_ok=True)
        shutil.copyfile(program, os.path.join(bin_dir, PROGRAM))
        os.chmod(os.path.join(bin_dir, PROGRAM), 0o755)


setup(
    version=project_version(),
    packages=["offloadkit", "offloadkit.adapters"],
    package_dir={"": "python"},
    package_data={"offloadkit": ["py.typed"], "offloadkit.adapters": ["classified.json"]},
    ext_modules=[Extension("offloadkit._native", sources=[])],
    cmdclass={"build_ext": cmake_build_ext},
    # setuptools' own build folder, inside the ignored build/ beside CMake's.
    options={"build": {"build_base": "build/python-package"}},
    zip_safe=False,
)
