# Installs the offloadkit Python package into a fresh virtual environment as a user would, with no
# package index: `python3 -m venv --system-site-packages` (NumPy, pytest and setuptools from the
# system), `pip install --no-build-isolation --no-index .`, then `pip wheel` of the same checkout;
# checks that the installed package is the one imported (not the checkout's), that its extension
# module, interposer, py.typed and entry points (console script, pytest11) are there, and that the
# console script runs. setup.py reuses this build folder (OFFLOADKIT_CMAKE_BUILD_DIR): the targets
# it builds are already up to date, so the install takes seconds.
#   cmake -DPYTHON=<base python> -DSOURCE=<checkout> -DBUILD=<build folder> -DVENV=<folder>
#         -DWHEELS=<folder> -P <this file>
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "'${cmd}' failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${VENV} ${WHEELS})
run(${PYTHON} -m venv --system-site-packages ${VENV})
set(py ${VENV}/bin/python)
# Where the base python is itself a virtual environment's (a GPU machine's torch venv, say),
# --system-site-packages reaches only the interpreter it was made from, not that environment's
# packages (NumPy, pytest): a .pth file in the new environment adds them, after its own.
run(${PYTHON} -c [=[
import site, sys
if sys.prefix != sys.base_prefix:
    print("\n".join(site.getsitepackages()))
]=])
set(parent_sites "${out}")
if(NOT parent_sites STREQUAL "")
  run(${py} -c [=[
import sysconfig
print(sysconfig.get_paths()["purelib"])
]=])
  string(STRIP "${out}" purelib)
  file(WRITE ${purelib}/offloadkit_base_environment.pth "${parent_sites}")
endif()
set(ENV{OFFLOADKIT_CMAKE_BUILD_DIR} ${BUILD})
set(ENV{PIP_DISABLE_PIP_VERSION_CHECK} 1)
run(${py} -m pip install --no-build-isolation --no-index --no-deps ${SOURCE})
run(${py} -m pip wheel --no-build-isolation --no-index --no-deps -w ${WHEELS} ${SOURCE})

# From a folder outside the checkout, so that nothing but the installed package can be imported.
run(${CMAKE_COMMAND} -E make_directory ${VENV}/scratch)
file(WRITE ${VENV}/scratch/check_installed.py [=[
import glob, importlib.metadata as md, os, sys, zipfile
import offloadkit, offloadkit._native, offloadkit.pytest
venv = sys.argv[1]
root = os.path.dirname(offloadkit.__file__)
assert root.startswith(venv), f"offloadkit was imported from {root}, not from {venv}"
assert os.path.isfile(os.path.join(root, "py.typed")), "py.typed is not installed"
lib = os.path.join(root, "lib", "liboffloadkit_interpose.so")
assert os.path.isfile(lib), f"{lib} is not installed"
program = os.path.join(root, "bin", "offloadkit")
assert os.access(program, os.X_OK), f"{program} (the offloadkit program) is not installed"
eps = md.entry_points()
pytest11 = [e for e in eps.select(group="pytest11") if e.value == "offloadkit.pytest"]
assert pytest11, "no pytest11 entry point names offloadkit.pytest"
scripts = [e for e in eps.select(group="console_scripts") if e.name == "offloadkit"]
assert scripts and scripts[0].value == "offloadkit.cli:main", scripts
wheels = glob.glob(os.path.join(sys.argv[2], "offloadkit-*.whl"))
assert len(wheels) == 1, f"expected one wheel, got {wheels}"
names = zipfile.ZipFile(wheels[0]).namelist()
for want in ("offloadkit/_native", "offloadkit/py.typed", "offloadkit/lib/liboffloadkit_interpose.so",
             "offloadkit/bin/offloadkit",
             "offloadkit/pytest.py", "offloadkit/cli.py"):
    assert any(n.startswith(want) for n in names), f"{want} is not in {wheels[0]}: {names}"
print("installed:", root, "wheel:", os.path.basename(wheels[0]))
]=])
execute_process(COMMAND ${py} ${VENV}/scratch/check_installed.py ${VENV} ${WHEELS}
  WORKING_DIRECTORY ${VENV}/scratch RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed package is incomplete (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
execute_process(COMMAND ${VENV}/bin/offloadkit version WORKING_DIRECTORY ${VENV}/scratch
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "offloadkit [0-9.]+ \\(extension module ${VENV}/"
   OR NOT out MATCHES "program: ${VENV}/[^\n]*/offloadkit/bin/offloadkit")
  message(FATAL_ERROR "the console script 'offloadkit version' (${rc}):\n${out}\n${err}")
endif()
message(STATUS "${out}")
