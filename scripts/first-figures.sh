#!/bin/bash
# Time from launch until the demo's dashboard shows a pool figure, as a new
# user would see it: start pooltop in a 100x30 tmux session and read the
# screen every 20 ms. Usage: scripts/first-figures.sh [runs] (default 5).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
bin=$dir/pooltop
go build -o "$bin" .
for _ in $(seq 1 "${1:-5}"); do
  tmux kill-session -t first-figures 2>/dev/null || true
  s=$(date +%s%N)
  tmux new -d -s first-figures -x 100 -y 30 "$bin 2>/dev/null"
  shown=""
  for _ in $(seq 1 500); do
    if tmux capture-pane -p -t first-figures 2>/dev/null | grep -q "█ \(UNUSED \)\?[~0-9]"; then
      shown=$(( ($(date +%s%N) - s) / 1000000 )); break
    fi
    sleep 0.02
  done
  echo "first figures after ${shown:-more than 10000} ms"
  tmux send-keys -t first-figures q
  for _ in $(seq 1 100); do tmux has -t first-figures 2>/dev/null || break; sleep 0.05; done
  tmux kill-session -t first-figures 2>/dev/null || true
done
