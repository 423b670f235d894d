#!/usr/bin/env bash
# "Nothing lost" demo (issue 3): guard an escape-zoo tree, kill -9 the guardian,
# show the tree orphaned in `ps`, `sweep` it, check every decoy is untouched, print
# the audit log. Runs itself inside a private PID namespace.
#   usage: scripts/demo-orphan-sweep.sh [path/to/undertaker] [tier]
set -u
U="${1:-$(cd "$(dirname "$0")/.." && pwd)/target/release/undertaker}"
TIER="${2:-auto}"
if [ -z "${DEMO_INSIDE:-}" ]; then
  userns=(); [ "$(id -u)" = 0 ] || userns=(--user --map-root-user)
  exec env DEMO_INSIDE=1 unshare "${userns[@]}" --pid --fork --mount-proc -- bash "$0" "$U" "$TIER"
fi
W=$(mktemp -d); D=$W/state
decoy() { perl -e 'my $f=shift; setpgrp(0,0); for my $s (qw(TERM INT HUP USR1 USR2)) { $SIG{$s}=sub { open my $h,">>",$f; print $h "$_[0]\n"; close $h } } sleep 1 while 1' "$1" & }
decoy "$W/decoy1.log"; DECOY1=$!
"$U" run --state-dir "$D" --tier "$TIER" --label zoo -- sh -c "
  sleep 1000 &
  perl -e '\$SIG{TERM}=q(IGNORE); sleep 1000' &
  setsid sh -c 'sleep 1000 & exit 0' &
  perl -e 'setpgrp(0,0); sleep 1000' &
  env -i setsid sh -c 'sleep 1000 & exit 0' &
  sh -c 'echo \$\$ > $W/exited.pid'
  touch $W/ready; wait" &
GUARD=$!
while [ ! -e "$W/ready" ]; do sleep 0.05; done; sleep 0.2
echo "+ kill -9 $GUARD   # the guardian"; kill -9 $GUARD; wait $GUARD 2>/dev/null
E=$(cat "$W/exited.pid"); echo $((E-1)) > /proc/sys/kernel/ns_last_pid
decoy "$W/decoy2.log"; DECOY2=$!
echo "decoys: $DECOY1 (same uid, no marker), $DECOY2 (took the exited member's pid $E)"
echo "+ undertaker ps --state-dir D --json"; "$U" ps --state-dir "$D" --json; echo
echo "+ undertaker sweep --state-dir D"; "$U" sweep --state-dir "$D"; echo "exit=$?"
alive=0
for p in /proc/[0-9]*; do
  p=${p#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] || [ "$p" = $DECOY1 ] || [ "$p" = $DECOY2 ] && continue
  st=$(awk '{print $3}' /proc/$p/stat 2>/dev/null); c=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)
  case "$c" in *sleep*|*perl*) [ "$st" != Z ] && alive=$((alive+1)) && echo "alive: $p $c";; esac
done
echo "tree processes alive after sweep: $alive"
for p in $DECOY1 $DECOY2; do echo "decoy $p state: $(awk '{print $3}' /proc/$p/stat)"; done
echo "decoy signal logs: [$(cat "$W"/decoy*.log 2>/dev/null)]"
echo "+ undertaker log --state-dir D --json"; "$U" log --state-dir "$D" --json; echo
kill -9 $DECOY1 $DECOY2; rm -rf "$W"
