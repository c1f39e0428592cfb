# Shared by the ci/ scripts: dependency installation, CUDA discovery, configure and build.
# Sourced, not run.
set -euo pipefail

OFFLOADKIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

log() { printf '\n== %s\n' "$*"; }

# Debian packages every build needs; installed with apt-get only where missing. pybind11-dev and
# python3-dev build the Python package's extension module (`python -m offloadkit check`, which
# `offloadkit check --python` runs), whose tests run NumPy implementations;
# libcli11-dev is the command line's option parser (header-only). python3-venv, python3-pip,
# python3-setuptools, python3-wheel and python3-pytest: the tests install the Python package into
# a virtual environment with pip (no package index) and run its pytest plugin.
OFFLOADKIT_DEBS=(cmake ninja-build g++ libgtest-dev librapidcheck-dev nlohmann-json3-dev
  libcli11-dev pybind11-dev python3-dev python3-numpy python3-venv python3-pip python3-setuptools
  python3-wheel python3-pytest)

install_deps() {
  local missing=() extra=("$@")
  for pkg in "${OFFLOADKIT_DEBS[@]}" "${extra[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

find_cuda() {
  if [ -z "${CUDA_HOME:-}" ]; then
    for d in /usr/local/cuda /usr/local/cuda-13.0 /opt/cuda; do
      [ -x "$d/bin/nvcc" ] && CUDA_HOME="$d" && break
    done
  fi
  if [ -z "${CUDA_HOME:-}" ] || [ ! -x "$CUDA_HOME/bin/nvcc" ]; then
    echo "error: the CUDA toolkit (nvcc) was not found; install CUDA 13 or set CUDA_HOME" >&2
    exit 1
  fi
  export CUDA_HOME PATH="$CUDA_HOME/bin:$PATH" CUDACXX="$CUDA_HOME/bin/nvcc"
}

# configure_build <build-dir> [cmake args...]
configure_build() {
  local dir="$1"; shift
  find_cuda
  log "configuring $dir"
  mkdir -p "$dir"
  cmake -S "$OFFLOADKIT_ROOT" -B "$dir" -G Ninja "$@" >"$dir/configure.log" 2>&1 || {
    cat "$dir/configure.log"; exit 1; }
  log "building $dir with $JOBS jobs"
  cmake --build "$dir" -j "$JOBS"
}

# ctest_summary <ctest log>: prints passed / failed / skipped counts from a ctest log.
ctest_summary() {
  local logf="$1"
  local line total failed skipped
  # "100% tests passed, 0 tests failed out of 61" (CMake 3.25) or "100% tests passed out of 60"
  # (newer CMake, when none failed).
  line=$(grep -E "tests passed(, [0-9]+ tests failed)? out of [0-9]+" "$logf" | tail -1 || true)
  total=$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$line")
  failed=0
  [[ "$line" == *"tests failed"* ]] && failed=$(sed -E 's/.*, ([0-9]+) tests failed.*/\1/' <<<"$line")
  # A "Not Run" entry (a fixture that failed, say) is one of the failed ones; skipped entries print
  # "***Skipped" once.
  skipped=$(grep -cE "\*\*\*Skipped" "$logf" || true)
  echo "tests: ${total:-0} run, $(( ${total:-0} - ${failed:-0} - ${skipped:-0} )) passed, ${failed:-0} failed, ${skipped:-0} skipped"
}

# check_installed_package <build-dir>: installs the build into a fresh scratch prefix, builds
# examples/plugin against it out of tree (find_package(offloadkit), a C plugin and a C++ consumer
# of offloadkit::core and offloadkit::testing), runs the consumer, then the installed command's
# check of the example plugin; where the Python package is built, the installed package's
# `python -m offloadkit check`, and the installed command's `check --python` with the package
# pip-installed into a virtual environment (OFFLOADKIT_PYTHON).
# Returns non-zero at the first step that fails.
check_installed_package() {
  local build="$1"
  local work="$build/package-check"
  local prefix="$work/prefix" consumer="$work/consumer"
  if grep -qE '^OFFLOADKIT_(SANITIZE:[A-Z]+=.+|COVERAGE:BOOL=ON)$' "$build/CMakeCache.txt"; then
    # Instrumented libraries need the instrumentation's runtime at link time, which the package
    # does not carry.
    log "skipped the installed-package check: $build is an instrumented build"
    return 0
  fi
  # A fresh prefix each time, so that a file the install rules no longer produce cannot pass.
  rm -rf "$work"
  mkdir -p "$work"
  log "installing $build into $prefix"
  cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1 || {
    cat "$work/install.log"; return 1; }
  log "building examples/plugin against $prefix (find_package(offloadkit))"
  local cxx
  cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
  cmake -S "$OFFLOADKIT_ROOT/examples/plugin" -B "$consumer" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} -DOFFLOADKIT_CONSUMER_CHECK=ON \
    >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; return 1; }
  cmake --build "$consumer" -j "$JOBS" || return 1
  log "running the consumer built against the installed libraries"
  "$consumer/offloadkit_consumer_check" || return 1
  local okit="$prefix/bin/offloadkit"
  log "$okit version"
  "$okit" version || return 1
  log "$okit check --executor host --plugin $consumer/liboffloadkit_example_plugin.so --cases 20"
  "$okit" check --executor host --plugin "$consumer/liboffloadkit_example_plugin.so" --cases 20 ||
    return 1
  local pydir="$prefix/lib/python3/dist-packages"
  if compgen -G "$pydir/offloadkit/_native*.so" >/dev/null; then
    # The installed package's own path: python -m offloadkit check, in the interpreter the
    # extension module was built for, with the installed package (not the checkout's) imported.
    local python
    python=$(sed -n 's/^OFFLOADKIT_PYTHON_MODULE_INTERPRETER:INTERNAL=//p' "$build/CMakeCache.txt")
    log "$python -m offloadkit check numpy_offload.py:make_arena --executor host --cases 10"
    (cd "$work" && PYTHONPATH="$pydir" "$python" -c "import offloadkit._native as m, sys
sys.exit(0 if m.__file__.startswith('$pydir/') else 'offloadkit._native imported from ' + m.__file__)" &&
      PYTHONPATH="$pydir" "$python" -m offloadkit check \
        "$OFFLOADKIT_ROOT/examples/python/numpy_offload.py:make_arena" --executor host --cases 10) ||
      return 1
    # The installed command's --python runs `python -m offloadkit check` in the interpreter
    # OFFLOADKIT_PYTHON names: a virtual environment with the package installed by pip, as a user
    # would (no package index; the build folder's targets are reused).
    local venv="$work/venv"
    log "pip install --no-build-isolation --no-index $OFFLOADKIT_ROOT into $venv"
    { "$python" -m venv --system-site-packages "$venv" &&
      OFFLOADKIT_CMAKE_BUILD_DIR="$build" PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip \
        install --no-build-isolation --no-index --no-deps "$OFFLOADKIT_ROOT"; } \
      >"$work/pip.log" 2>&1 || { cat "$work/pip.log"; return 1; }
    log "OFFLOADKIT_PYTHON=$venv/bin/python $okit check --executor host --python numpy_offload.py:make_arena --cases 10"
    (cd "$work" && OFFLOADKIT_PYTHON="$venv/bin/python" "$okit" check --executor host --cases 10 \
      --python "$OFFLOADKIT_ROOT/examples/python/numpy_offload.py:make_arena") || return 1
  fi
}
