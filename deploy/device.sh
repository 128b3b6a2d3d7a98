#!/bin/bash
# On a lent GPU machine, in the root of the working tree's copy, with .device-bundle carried (deploy/device.py pack):
#   bash deploy/device.sh SECONDS CHAPTER [records options]
# records CHAPTER (python -m fedlib records; default --device auto, so cuda there) and starts no round after
# SECONDS minus a margin for packing; then puts records.tgz (the new result records) and records.log in $OUT
# (default ./device-out). Runs finished on the device land; a run cut at the deadline is lost with the machine,
# so size the work to the call (--workers, --max-runs 1, --tables, --seeds).
set -u -o pipefail
[ $# -ge 2 ] || { echo "usage: bash deploy/device.sh SECONDS CHAPTER [records options]" >&2; exit 2; }
seconds=$1; shift
started=$(date +%s)
bundle=.device-bundle
out=${OUT:-device-out}
python=${PYTHON:-python3}
[ -f $bundle/code_version ] || { echo "error: $bundle/code_version missing: run deploy/device.py pack and carry $bundle" >&2; exit 2; }
mkdir -p "$out"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TQDM_DISABLE=1
export FEDLIB_DATA=${FEDLIB_DATA:-/tmp/fedlib-data} FEDLIB_CODE_VERSION=$(cat $bundle/code_version)
for f in $bundle/data/*/*.xz; do
  [ -e "$f" ] || continue
  dir=$FEDLIB_DATA/$(basename "$(dirname "$f")"); mkdir -p "$dir"
  [ -s "$dir/$(basename "$f" .xz)" ] || xz -dc "$f" > "$dir/$(basename "$f" .xz)" || exit 1
done
marker=$(mktemp); sleep 1
left=$(( seconds - 30 - ($(date +%s) - started) ))
[ $left -gt 0 ] || { echo "error: no time left to record ($seconds s)" >&2; exit 2; }
"$python" -m fedlib records "$@" --deadline $left 2>&1 | tee "$out/records.log"
status=$?
find results -newer "$marker" -type f -name '*.json' | sort > "$out/new_records.txt"
tar czf "$out/records.tgz" -T "$out/new_records.txt"
echo "records exited $status after $(( $(date +%s) - started )) s; $(wc -l < "$out/new_records.txt") new record(s) in $out/records.tgz"
exit $status
