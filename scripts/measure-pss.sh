#!/usr/bin/env bash
# PSS per guarded tree, side by side with tini (docs/BENCHMARKS.md, "Memory per tree").
# Starts N idle trees under each wrapper (`WRAPPER -- sleep 1000`), waits SETTLE
# seconds (default 5: past a guardian's self-healing look, which starts 1 s after CMD),
# sums /proc/PID/smaps_rollup's Pss over the wrapper's own processes (never the guarded
# `sleep`), divides by N, then ends every process it started.
#   scripts/measure-pss.sh [UNDERTAKER] [N]
# With BREAKDOWN=1 it also prints undertaker's Pss per mapping (from /proc/PID/smaps),
# per tree and split between the sentinels and the guardians (needs python3).
# Needs tini (scripts/install-anchors.sh). Prints one line per contender, KiB.
set -euo pipefail
UT=${1:-target/release/undertaker}
N=${2:-20}
SETTLE=${SETTLE:-5}
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

# Sum of Pss (KiB) over the given pids.
pss_of() {
  local sum=0 v
  for p in "$@"; do
    v=$(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)
    sum=$((sum + ${v:-0}))
  done
  echo "$sum"
}

# Pids of every process in the subtree of $1 except those running `sleep`.
wrapper_pids() {
  local root=$1 pid comm
  for pid in $(ps -o pid= --ppid "$root" || true); do wrapper_pids "$pid"; done
  comm=$(cat "/proc/$root/comm" 2>/dev/null || true)
  [ "$comm" = sleep ] || echo "$root"
}

# Pss per mapping over the given pids: "== PID ROLE" then that pid's smaps, into python.
breakdown() {
  local roots=("$@") r p
  for r in "${roots[@]}"; do
    for p in $(wrapper_pids "$r"); do
      if [ "$p" = "$r" ]; then echo "== $p sentinel"; else echo "== $p guardian"; fi
      cat "/proc/$p/smaps" 2>/dev/null || true
    done
  done | python3 -c "$BREAKDOWN_PY" "$N" "$(readlink -f "$UT")"
}
BREAKDOWN_PY=$(cat <<'PY'
import collections, re, sys
n = int(sys.argv[1]); exe = sys.argv[2]
pss = collections.defaultdict(collections.Counter)
key = role = None
for line in sys.stdin:
    if line.startswith("=="):
        role = line.split()[2]
        continue
    m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$", line)
    if m:
        name = m.group(2) or "[anon]"
        key = ("undertaker" if name == exe else name.rsplit("/", 1)[-1], m.group(1))
    elif line.startswith("Pss:"):
        pss[key][role] += int(line.split()[1])
print("  %-24s %-5s %8s %8s %8s" % ("mapping", "perms", "per tree", "sentinel", "guardian"))
for (name, perms), c in sorted(pss.items(), key=lambda kv: -sum(kv[1].values())):
    if sum(c.values()) / n >= 1:
        print("  %-24s %-5s %8.1f %8.1f %8.1f" % (name[:24], perms, sum(c.values()) / n,
                                                  c["sentinel"] / n, c["guardian"] / n))
PY
)

measure() {
  local name=$1; shift
  local roots=()
  for _ in $(seq "$N"); do
    "$@" -- sleep 1000 </dev/null >/dev/null 2>&1 &
    roots+=($!)
  done
  sleep "$SETTLE"
  local pids=()
  for r in "${roots[@]}"; do pids+=($(wrapper_pids "$r")); done
  local total
  total=$(pss_of "${pids[@]}")
  printf '%-28s %4d trees  %3d wrapper processes  Pss %7d KiB  per tree %5d KiB\n' \
    "$name" "$N" "${#pids[@]}" "$total" $((total / N))
  if [ "${BREAKDOWN:-}" = 1 ] && [ "$name" = "undertaker run" ]; then breakdown "${roots[@]}"; fi
  # SIGTERM to the wrappers we started (tini forwards it; undertaker tears down).
  kill -TERM "${roots[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}

measure "tini -s" tini -s
measure "undertaker run" env UNDERTAKER_STATE_DIR="$state" "$UT" run
