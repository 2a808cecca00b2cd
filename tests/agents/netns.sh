#!/usr/bin/env bash
# Runs a command in a network namespace that has only loopback (needs root, or a user
# namespace that allows it), so nothing it starts can reach another host. DNS points at
# 127.0.0.1 (an empty resolv.conf), where nothing listens, so a stray lookup fails at once instead of timing out.
# Usage: tests/agents/netns.sh COMMAND [ARGS...]
set -euo pipefail
[[ $# -gt 0 ]] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
exec unshare --net --mount -- bash -c '
  set -euo pipefail
  ip link set lo up
  mount --bind /dev/null /etc/resolv.conf   # empty: resolvers fall back to 127.0.0.1
  exec "$@"' netns "$@"
