# Shared by the ci/ scripts: dependency installation, CUDA discovery, configure and build.
# Sourced, not run.
set -euo pipefail

OFFLOADKIT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="${JOBS:-$(nproc)}"

log() { printf '\n== %s\n' "$*"; }

# Debian packages every build needs; installed with apt-get only where missing.
OFFLOADKIT_DEBS=(cmake ninja-build g++ libgtest-dev librapidcheck-dev nlohmann-json3-dev)

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
  skipped=$(grep -cE "\*\*\*Skipped|Not Run" "$logf" || true)
  echo "tests: ${total:-0} run, $(( ${total:-0} - ${failed:-0} - ${skipped:-0} )) passed, ${failed:-0} failed, ${skipped:-0} skipped"
}
