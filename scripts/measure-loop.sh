#!/usr/bin/env bash
# 300 × `WRAPPER /bin/true` in a shell loop (or CONCURRENT=100: that many started at
# once, then `wait`), side by side with `tini -s --`, bwrap and bare (docs/BENCHMARKS.md,
# "Start-up"). Contenders take turns, ROUNDS rounds; prints each round's milliseconds
# and the median ratios to tini, of wall time and of CPU time.
#   scripts/measure-loop.sh [UNDERTAKER | "WRAPPER PREFIX"]...
# An argument without a space is an undertaker binary (`UNDERTAKER run --`); one with a
# space is used as the prefix itself (e.g. "env UNDERTAKER_NO_HEAL=1 ut run --").
# Default: target/release/undertaker. The scratch state dir is made by `mktemp -d`
# (TMPDIR picks its file system). FLOOR=1 adds the C floor (crates/undertaker-bench/
# floor/floor.c): one process (`-`), a guardian (`g`), plus a cgroup (`gc`), plus a
# record file (`gcr`).
set -euo pipefail
N=${N:-300}
ROUNDS=${ROUNDS:-5}
CONCURRENT=${CONCURRENT:-}
[ $# -gt 0 ] || set -- target/release/undertaker
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
export UNDERTAKER_STATE_DIR="$state"
names=(bare "tini -s --")
# bubblewrap: the peer with the same guarantee (scripts/install-anchors.sh installs it).
if command -v bwrap >/dev/null && bwrap --dev-bind / / --die-with-parent --unshare-pid /bin/true 2>/dev/null; then
  names+=("bwrap --dev-bind / / --die-with-parent --unshare-pid --")
fi
for u in "$@"; do
  case "$u" in
  *" "*) names+=("$u") ;;
  *) names+=("$u run --") ;;
  esac
done
if [ -n "${FLOOR:-}" ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  cc -O2 -o "$state/floor" "$here/crates/undertaker-bench/floor/floor.c"
  mkdir -p "$state/floor-state"
  export FLOOR_STATE="$state/floor-state"
  for f in - g gc gcr; do names+=("$state/floor $f --"); done
fi
loop() { for _ in $(seq "$N"); do "$@" /bin/true; done; }
together() {
  for _ in $(seq "$CONCURRENT"); do "$@" /bin/true & done
  wait
}
run() { if [ -n "$CONCURRENT" ]; then together "$@"; else loop "$@"; fi; }
# Wall milliseconds of the round and the CPU milliseconds of everything it started,
# what a wrapper left running after it exited included (scripts/subreap-time.py: a
# subreaper reaps it; the shell's own reaped-children times missed bwrap's namespace).
here=$(cd "$(dirname "$0")" && pwd)
export N CONCURRENT
timed() {
  local s e
  s=$(date +%s%N)
  "$@"
  e=$(date +%s%N)
  echo "$(((e - s) / 1000000))"
}
ms() {
  local out
  out=$(python3 "$here/subreap-time.py" bash -c "$(declare -f loop together run timed); timed \"\$@\"" ms "$@")
  [[ $out =~ ^[0-9]+$'\n'-?[0-9]+$ ]] || { echo "measure-loop: a round of $* failed: $out" >&2; exit 1; }
  echo ${out/$'\n'/ }
}
declare -A times cpu
for r in $(seq "$ROUNDS"); do
  for n in "${names[@]}"; do
    # shellcheck disable=SC2086 # the prefix is words on purpose
    if [ "$n" = bare ]; then t=$(ms run env); else t=$(ms run $n); fi
    times[$n]+="${t% *} "
    cpu[$n]+="${t#* } "
  done
  # Record files of finished runs pile up in a real state dir too; the floor's are
  # removed between rounds so both start each round alike.
  rm -f "$state"/floor-state/* 2>/dev/null || true
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
tini=$(echo "${times[tini -s --]}" | median)
tini_cpu=$(echo "${cpu[tini -s --]}" | median)
what=${CONCURRENT:+"$CONCURRENT at once"}
# Where the records went: on an ext4 without a journal each new file's inode search
# skips recently freed inodes, so the state dir's file system and its recent deletions
# weigh on undertaker's figures (docs/BENCHMARKS.md, "Issue 30, fourth round").
echo "${what:-$N in a loop}, $ROUNDS rounds; state dir $state on $(stat -f -c %T "$state"); $(uptime)"
for n in "${names[@]}"; do
  m=$(echo "${times[$n]}" | median)
  c=$(echo "${cpu[$n]}" | median)
  printf '%-60s %6d ms  (rounds: %s) %s× tini; CPU %6d ms, %s× tini\n' "${n/$state/\$state}" "$m" "${times[$n]}" \
    "$(awk -v a="$m" -v b="$tini" 'BEGIN {printf "%.2f", a/b}')" "$c" "$(awk -v a="$c" -v b="$tini_cpu" 'BEGIN {printf "%.2f", (b > 0 ? a/b : 0)}')"
done
