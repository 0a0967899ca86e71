#!/usr/bin/env bash
# scripts/ci-runs.sh [N]: the second half of the proof of stability (the
# first is scripts/flake-hunt.sh): .ci/run N times in a row (default 5),
# each on a fresh clone of this repository's HEAD at the start, one after
# the other, stopping at the first failure. As root, like CI (.ci/run
# installs what it needs). Each run's log is kept in $OUT/runN.log (default
# /tmp/ci-runs); a line per run goes to stdout. About 14 minutes a run on
# 2 cores.
set -uo pipefail
n=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/ci-runs}
rev=$(git -C "$repo" rev-parse HEAD)
mkdir -p "$out"
for i in $(seq 1 "$n"); do
  dir=$out/clone$i
  rm -rf "$dir"
  git clone -q "$repo" "$dir" && git -C "$dir" checkout -q "$rev" || exit 1
  start=$(date +%s)
  (cd "$dir" && CI=true bash .ci/run >"$out/run$i.log" 2>&1)
  rc=$?
  echo "run $i of $n on $(git -C "$dir" rev-parse --short HEAD): rc=$rc in $(($(date +%s) - start)) s ($out/run$i.log)"
  [ "$rc" = 0 ] || exit "$rc"
  rm -rf "$dir"
done
echo "ok: $n runs of .ci/run in a row"
