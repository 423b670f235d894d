#!/usr/bin/env bash
# Installs the benchmark's anchors (Debian packages) when they are missing:
# tini (tini, tini-static), dumb-init, catatonit, procps (ps, pgrep), and bubblewrap
# (bwrap: the peer with undertaker's guarantee, issue 30).
# As root: apt-get installs them. Otherwise: prints what is missing and exits 1.
# undertaker-bench reports a missing anchor as "unavailable"; it never needs this.
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ] || [ -x "/usr/sbin/$1" ]; }
have tini || missing+=(tini)
have dumb-init || missing+=(dumb-init)
have catatonit || [ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
{ have ps && have pgrep; } || missing+=(procps)
have bwrap || missing+=(bubblewrap)

if ((${#missing[@]} == 0)); then
  echo "anchors present: tini, dumb-init, catatonit, procps, bwrap"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "missing anchors: ${missing[*]}" >&2
  echo "install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
