#!/usr/bin/env bash
# Runs every fuzz target for a short while (FUZZTIME, default 10s each).
# Their seed corpora and the inputs they once failed on live in each
# package's testdata/fuzz and also run as plain tests with `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-10s}
targets=(
  "./engine FuzzPasswordNeverPrinted"
  "./collector FuzzScanRecording"
  "./collector FuzzTableNames"
  "./internal/bytesize FuzzSizeAndDurationFlags"
)
for t in "${targets[@]}"; do
  set -- $t
  echo "fuzz $2 ($1) for $fuzztime"
  go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" "$1" >/tmp/pooltop-fuzz.log 2>&1 || { cat /tmp/pooltop-fuzz.log; exit 1; }
done
