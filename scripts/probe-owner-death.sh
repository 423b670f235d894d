#!/usr/bin/env bash
# Owner-death probe: a host starts `<contender> <tree>` and is then kill -9ed; we
# count the tree's processes still alive 2 s later. The tree: a plain child, a
# SIGTERM ignorer, a setsid double-fork escapee and a setpgid(0,0) process.
# Runs itself inside a private PID namespace, so it can only touch its own processes.
#   usage: scripts/probe-owner-death.sh [path/to/undertaker]
set -euo pipefail
UT="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/undertaker}"
if [ -z "${PROBE_INSIDE:-}" ]; then
  userns=(); [ "$(id -u)" = 0 ] || userns=(--user --map-root-user)
  exec env PROBE_INSIDE=1 unshare "${userns[@]}" --pid --fork --mount-proc -- bash "$0" "$UT"
fi
dir=$(mktemp -d)
cat > "$dir/tree.pl" <<'PERL'
use POSIX (); my $out = shift;
sub note { open(my $f, '>>', $out) or die; print $f "$_[0] $$\n"; close $f; }
sub forever { sleep 1000 while 1 }
sub spawn { my $c = shift; my $p = fork(); if ($p == 0) { $c->(); POSIX::_exit(0) } $p }
spawn(sub { note('plain'); forever() });
spawn(sub { $SIG{TERM} = 'IGNORE'; note('ignores_term'); forever() });
spawn(sub { POSIX::setsid(); spawn(sub { note('setsid_escapee'); forever() }); POSIX::_exit(0) });
spawn(sub { setpgrp(0, 0); note('own_group'); forever() });
forever();
PERL
probe() {
  local name=$1; shift
  if ! command -v "$1" >/dev/null 2>&1 && [ ! -x "$1" ]; then
    printf '%-12s unavailable (%s not installed)\n' "$name" "$1"; return
  fi
  local pids="$dir/$name.pids"; : > "$pids"
  bash -c "$* perl $dir/tree.pl $pids & wait" &
  local host=$!
  for _ in $(seq 200); do [ "$(wc -l < "$pids")" -ge 4 ] && break; sleep 0.05; done
  kill -9 "$host"; wait "$host" 2>/dev/null || true
  sleep 2
  local alive=0 list=""
  while read -r kind pid; do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
    if [ -n "$state" ] && [ "$state" != Z ]; then alive=$((alive+1)); list="$list $kind"; fi
  done < "$pids"
  printf '%-12s %d of 4 alive 2 s after the host was kill -9ed%s\n' "$name" "$alive" "${list:+ (}${list# }${list:+)}"
  # Clean up what this probe started (inside our private namespace).
  while read -r _ pid; do kill -9 "$pid" 2>/dev/null || true; done < "$pids"
}
probe undertaker "$UT" run --grace 300ms --
probe tini tini -s --
probe dumb-init dumb-init
probe catatonit catatonit --
rm -rf "$dir"
