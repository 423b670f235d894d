#!/usr/bin/env bash
# CMD-exit-to-guardian-exit time of `undertaker run` (docs/BENCHMARKS.md, "Finished
# record files"), with N finished record files in
# trees/ (N = 0 and 40000, interleaved; each trial refills trees/). Needs python3.
# Usage: scripts/bench-finished-records.sh UNDERTAKER [TRIALS]
set -euo pipefail
UT=$1; TRIALS=${2:-10}
S=$(mktemp -d)/state
UNDERTAKER_NO_HEAL=1 "$UT" --state-dir "$S" run -- true
SEED=$(ls "$S"/trees/*.tree); ID=$(basename "$SEED" .tree); BODY=$(mktemp); cp "$SEED" "$BODY"
fill() {  # exactly $1 finished record files, copies of the seed under fresh ids
  find "$S/trees" -name "*.tree" -delete
  python3 - "$S/trees" "$ID" "$BODY" "$1" <<'PY'
import sys
d, id, body, n = sys.argv[1], sys.argv[2], open(sys.argv[3]).read(), int(sys.argv[4])
for i in range(n):
    o = id[:-8] + format(i, "08x")
    open(f"{d}/{o}.tree", "w").write(body.replace(id, o))
PY
}
for t in $(seq "$TRIALS"); do
  for n in 0 40000; do
    fill "$n"
    stamp=$("$UT" --state-dir "$S" run -- sh -c 'sleep 1.5; date +%s%N')
    end=$(date +%s%N)
    echo "$n $(( (end - stamp) / 1000 ))"
  done
done | awk '{v[$1]=v[$1]" "$2} END {for (n in v) print n, v[n]}' | while read -r n rest; do
  sorted=$(printf '%s\n' $rest | sort -n | tr '\n' ' ')
  set -- $sorted; cnt=$#; med=$(printf '%s\n' $sorted | sed -n "$(( (cnt+1)/2 ))p")
  echo "records=$n trials=$cnt median_us=$med min_us=$1 max_us=${!cnt}"
done
rm -rf "$(dirname "$S")" "$BODY"
