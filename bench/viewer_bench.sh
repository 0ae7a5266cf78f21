#!/usr/bin/env bash
# bench/viewer_bench.sh [EVENTS ...] — the viewer on generated traces of EVENTS events over 8 ranks
# (default: 10 million, then 50 million): the time to open (load + index + level of detail), the CPU
# time of every frame over bench/viewer_script.txt (fully zoomed out, a step, a single kernel, pans
# at each zoom, search, selection, statistics), memory per event, how soon after the timeline the
# Statistics tab showed rows and was complete and the Steps tab filled, and the process's peak RSS.
# Figures, not pass/fail. Needs a display: runs under its own Xvfb through xvfb-run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRAINSCOPE_BIN:-$root/build/bin}
work=${TRAINSCOPE_BENCH_DIR:-/tmp/trainscope-viewer-bench}
mkdir -p "$work"
sizes=("$@")
[ ${#sizes[@]} -eq 0 ] && sizes=(10000000 50000000)
for n in "${sizes[@]}"; do
  db="$work/gen-$n.db"
  if [ ! -f "$db" ]; then
    echo "[bench] generating $n events over 8 ranks into $db"
    start=$(date +%s.%N)
    "$bin/trainscope_bench_viewer_gen" "$db" "$n" 8 20
    echo "[bench] generated in $(echo "$(date +%s.%N) - $start" | bc) s, $(du -h "$db" | cut -f1) on disk"
  fi
  sync
  # Warm the page cache: the figure is the viewer's work, not the disk's.
  cat "$db" > /dev/null
  echo "[bench] $n events:"
  /usr/bin/time -f "[bench] peak RSS %M KiB, wall %e s" \
    xvfb-run -a -s "-screen 0 1920x1080x24" "$bin/trainscope-viewer" "$db" --screenshot "$work/shot-$n.png" \
    --script "$root/bench/viewer_script.txt" --frame-stats
done
