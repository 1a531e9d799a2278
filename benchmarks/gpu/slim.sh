#!/usr/bin/env bash
# Here: make the working tree that a device call sends fit its 64 MiB (the tree alone is ~117 MiB on
# 2026-11-28: bench results, README pictures and the shipped checkpoints). `on` takes those paths out of the
# index and ignores them locally (the files stay on disk; prepare.sh carries the checkpoints in the
# payload and device.sh puts them back on the device); `off` undoes both. Commit nothing between.
#   bash benchmarks/gpu/slim.sh on && bash benchmarks/gpu/prepare.sh   # pieces sized to what the tree leaves
#   ... the device calls (README.md) ...
#   bash benchmarks/gpu/slim.sh off
set -euo pipefail
shopt -s nullglob                  # a pattern that matches nothing adds nothing
cd "$(dirname "$0")/../.."
EXCLUDE=.git/info/exclude
# bench results one and two folders down (a rerun's subfolder), earlier GPU runs' raw results, pictures, checkpoints
PATHS=(benchmarks/*/results.json benchmarks/*/*/results.json benchmarks/*/report.html benchmarks/gpu/*/bench-*.json
       assets specviz/data/checkpoints)
case ${1:?on or off} in
  on)  mkdir -p .git/info && touch "$EXCLUDE"
       git rm -r --cached -q "${PATHS[@]}"
       { echo "# specviz-gpu-slim"; echo "/benchmarks/*/results.json"; echo "/benchmarks/*/*/results.json";
         echo "/benchmarks/*/report.html"; echo "/benchmarks/gpu/*/bench-*.json"; echo "/assets/";
         echo "/specviz/data/checkpoints/"; echo "# specviz-gpu-slim end"; } >> "$EXCLUDE"
       echo "the tree that travels: $(( $( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | awk '/total$/ {s += $1} END {print s}') >> 20 )) MiB" ;;
  off) git reset -q -- "${PATHS[@]}"
       sed -i '/^# specviz-gpu-slim$/,/^# specviz-gpu-slim end$/d' "$EXCLUDE"
       git status --short | head ;;
  *)   echo "on or off"; exit 2 ;;
esac
