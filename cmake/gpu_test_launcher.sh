# shellcheck shell=sh
# Runs a GPU test on the GPUs that ctest allocated to it (OFFLOADKIT_GPU_RESOURCE_GROUPS=ON and
# `ctest --resource-spec-file FILE`). ctest sets CTEST_RESOURCE_GROUP_COUNT and, for each group i,
# CTEST_RESOURCE_GROUP_<i>_GPUS="id:<id>,slots:<n>" (several such entries separated by ';'). The
# ids are nvidia-smi indexes (ci/gpu writes them into the spec file), so this exports
# CUDA_VISIBLE_DEVICES=<the ids in group order> with CUDA_DEVICE_ORDER=PCI_BUS_ID (nvidia-smi's
# order) and then runs the command in its place: device 0 of the test is the GPU of group 0.
# Without CTEST_RESOURCE_GROUP_COUNT (ctest run without a spec file, or the command run by hand)
# the command runs unchanged. Not installed; run through `sh`.
#   sh gpu_test_launcher.sh COMMAND [ARGS...]
set -eu

me="gpu_test_launcher.sh"
if [ "$#" -eq 0 ]; then
  echo "$me: no command given: usage: sh $me COMMAND [ARGS...]" >&2
  exit 2
fi
if [ -z "${CTEST_RESOURCE_GROUP_COUNT+set}" ]; then
  exec "$@"
fi

count="$CTEST_RESOURCE_GROUP_COUNT"
case "$count" in
  '' | *[!0-9]*)
    echo "$me: CTEST_RESOURCE_GROUP_COUNT = '$count': expected an integer >= 0" >&2
    exit 2
    ;;
esac

ids=""
i=0
while [ "$i" -lt "$count" ]; do
  eval "gpus=\${CTEST_RESOURCE_GROUP_${i}_GPUS-}"
  if [ -z "$gpus" ]; then
    echo "$me: resource group $i has no GPU: CTEST_RESOURCE_GROUP_${i}_GPUS is empty or unset" \
      "(the test's RESOURCE_GROUPS should read 'gpus:1' per group)" >&2
    exit 2
  fi
  saved_ifs="$IFS"
  IFS=';'
  for entry in $gpus; do
    case "$entry" in
      id:?*,slots:*)
        id="${entry#id:}"
        id="${id%%,slots:*}"
        ;;
      *)
        IFS="$saved_ifs"
        echo "$me: CTEST_RESOURCE_GROUP_${i}_GPUS = '$gpus': expected 'id:<id>,slots:<n>'" >&2
        exit 2
        ;;
    esac
    # One GPU listed twice (a spec file giving a GPU several slots) is visible once.
    case ",$ids," in
      *",$id,"*) ;;
      *) ids="${ids:+$ids,}$id" ;;
    esac
  done
  IFS="$saved_ifs"
  i=$((i + 1))
done

if [ -n "$ids" ]; then
  CUDA_VISIBLE_DEVICES="$ids"
  CUDA_DEVICE_ORDER=PCI_BUS_ID
  export CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER
fi
exec "$@"
