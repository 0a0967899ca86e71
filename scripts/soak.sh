#!/usr/bin/env bash
# soak.sh runs the demo (its embedded PostgreSQL, workload and reaper,
# headless) and `pooltop watch` on the demo's pool side by side for a
# while, and every STEP prints, for each process, its resident memory, Go
# heap, goroutines and CPU (share of one core over the step), read from
# its own /metrics (--listen). Flat memory and a few % of a core is the
# goal (docs/benchmarks.md).
#
#   scripts/soak.sh [MINUTES] [STEP_SECONDS]     # default 60 minutes, 60 s
set -euo pipefail
minutes=${1:-60}
step=${2:-60}
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; [ -n "${SOAK_DEBUG:-}" ] && cat "$tmp"/*.err >&2; rm -rf "$tmp"' EXIT
go build -o "$tmp/pooltop" .

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
demo_port=$(free_port)
watch_port=$(free_port)
"$tmp/pooltop" --headless --listen "127.0.0.1:$demo_port" >/dev/null 2>"$tmp/demo.err" &
dsn=""
for _ in $(seq 1 600); do # the demo names its server once the pool is made
	dsn=$(sed -n 's/.*DATABASE_URL=\([^;]*\);.*/\1/p' "$tmp/demo.err")
	[ -n "$dsn" ] && break
	sleep 0.1
done
if [ -z "$dsn" ]; then
	echo "soak: the demo did not start:" >&2
	cat "$tmp/demo.err" >&2
	exit 1
fi
"$tmp/pooltop" watch --headless --listen "127.0.0.1:$watch_port" --dsn "$dsn" >/dev/null 2>"$tmp/watch.err" &
for _ in $(seq 1 300); do
	grep -q "metrics at" "$tmp/watch.err" && break
	sleep 0.1
done
if ! grep -q "metrics at" "$tmp/watch.err"; then
	echo "soak: watch did not start:" >&2
	cat "$tmp/watch.err" >&2
	exit 1
fi

# sample PORT: rss_bytes heap_bytes goroutines cpu_seconds
sample() {
	curl -fsS "http://127.0.0.1:$1/metrics" | awk '
		/^process_resident_memory_bytes / { rss = $2 }
		/^go_memstats_heap_alloc_bytes / { heap = $2 }
		/^go_goroutines / { g = $2 }
		/^process_cpu_seconds_total / { cpu = $2 }
		END { printf "%d %d %d %s\n", rss, heap, g, cpu }'
}

printf '%-6s  %-36s  %-36s\n' "" "demo (workload, reaper, collector)" "watch"
printf '%-6s  %8s %8s %6s %8s  %8s %8s %6s %8s\n' minute "RSS MiB" "heap MiB" gorout "CPU %" "RSS MiB" "heap MiB" gorout "CPU %"
read -r _ _ _ dcpu0 < <(sample "$demo_port")
read -r _ _ _ wcpu0 < <(sample "$watch_port")
for m in $(seq 1 $((minutes * 60 / step))); do
	sleep "$step"
	read -r drss dheap dg dcpu < <(sample "$demo_port")
	read -r wrss wheap wg wcpu < <(sample "$watch_port")
	awk -v m="$(awk -v s="$step" -v i="$m" 'BEGIN { printf "%.1f", s * i / 60 }')" -v s="$step" \
		-v drss="$drss" -v dheap="$dheap" -v dg="$dg" -v dcpu="$dcpu" -v dcpu0="$dcpu0" \
		-v wrss="$wrss" -v wheap="$wheap" -v wg="$wg" -v wcpu="$wcpu" -v wcpu0="$wcpu0" 'BEGIN {
		printf "%-6s  %8.1f %8.1f %6d %8.1f  %8.1f %8.1f %6d %8.1f\n", m,
			drss / 1048576, dheap / 1048576, dg, 100 * (dcpu - dcpu0) / s,
			wrss / 1048576, wheap / 1048576, wg, 100 * (wcpu - wcpu0) / s }'
	dcpu0=$dcpu
	wcpu0=$wcpu
done
