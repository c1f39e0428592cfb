#!/usr/bin/env bash
# Fails if any executable or shared library in a build directory links libcuda: every binary must
# start on a machine without a GPU driver (cudart is static, driver entry points come from
# cudaGetDriverEntryPointByVersion, CUPTI is loaded with dlopen).
#   bash ci/check-no-libcuda.sh <build-dir>
set -euo pipefail

dir="${1:-}"
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
  echo "usage: $0 <build-dir>  (got '${dir}', which is not a directory)" >&2
  exit 2
fi

checked=0
bad=()
while IFS= read -r -d '' f; do
  # Only ELF executables and shared objects; skip object files, archives and scripts. Outputs
  # are read into variables first: `grep -q` at the end of a pipe would make pipefail report the
  # writer's SIGPIPE, and a missed match here would pass a bad binary.
  [ "$(head -c 4 "$f" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  header="$(readelf -h "$f" 2>/dev/null || true)"
  grep -qE 'Type:[[:space:]]+(EXEC|DYN)' <<<"$header" || continue
  checked=$((checked + 1))
  # NEEDED names what is linked even where the library is absent; ldd adds what those libraries
  # pull in where they are present.
  needed="$(readelf -d "$f" 2>/dev/null | grep NEEDED || true)"
  resolved="$(ldd "$f" 2>/dev/null || true)"
  if grep -qE '(^|[^a-z_])libcuda\.so' <<<"$needed"$'\n'"$resolved"; then
    bad+=("$f: $(grep -hE 'libcuda\.so' <<<"$needed"$'\n'"$resolved" | head -1 | tr -s ' \t' ' ')")
  fi
done < <(find -H "$dir" -type f \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) \
           -not -path '*/CMakeFiles/*' -print0)

if ((${#bad[@]})); then
  echo "FAIL: ${#bad[@]} of ${checked} binaries link libcuda.so:"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "ok: none of ${checked} binaries in ${dir} links libcuda.so"
