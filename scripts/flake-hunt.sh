#!/usr/bin/env bash
# flake-hunt.sh runs the packages with scenarios and real faults several
# times under the race detector while busy loops load every core, so that a
# test which depends on the machine's speed or on chance fails here rather
# than in CI. Each package's log goes to $OUT (default a new directory);
# the summary lists every test that failed, with the package and the run.
#
#   scripts/flake-hunt.sh                      # count 5, the default packages
#   COUNT=10 scripts/flake-hunt.sh ./engine/   # other packages, more runs
#   BUSY=0 scripts/flake-hunt.sh               # without the busy loops
set -uo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
busy=${BUSY:-$(nproc)}
out=${OUT:-$(mktemp -d /tmp/flake-hunt-XXXXXX)}
mkdir -p "$out"
pkgs=("$@")
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./engine/ ./workload/ ./collector/ ./internal/cli/ ./internal/demo/ ./internal/faultproxy/ ./tui/)

loops=()
trap 'kill "${loops[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 1 "$busy"); do
	(while :; do :; done) &
	loops+=($!)
done
echo "flake-hunt: count $count, $busy busy loops, logs in $out"

status=0
for p in "${pkgs[@]}"; do
	log="$out/$(echo "$p" | tr -c 'a-zA-Z0-9\n' '_').log"
	start=$(date +%s)
	if go test -race -count="$count" -timeout 60m "$p" >"$log" 2>&1; then
		echo "ok    $p ($(($(date +%s) - start)) s)"
	else
		status=1
		echo "FAIL  $p ($(($(date +%s) - start)) s): $log"
		grep -E '^\s*--- FAIL' "$log" | sed 's/^/      /' | sort | uniq -c
	fi
done
exit $status
