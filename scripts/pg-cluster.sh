#!/usr/bin/env bash
# Starts a throwaway PostgreSQL cluster on a unix socket in a temporary directory and
# prints the URL to reach it. Usage: scripts/pg-cluster.sh start DIR | stop DIR | bin
# (`bin` prints the directory of the server binaries, or fails when there are none).
# The server binaries are found on PATH or under /usr/lib/postgresql/*/bin. initdb
# refuses to run as root, so as root the cluster belongs to the user `nobody`.
set -euo pipefail

pg_bin() {
  local b
  if b=$(command -v initdb 2>/dev/null) && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(readlink -f "$b")"
    return 0
  fi
  for b in /usr/lib/postgresql/*/bin; do
    if [[ -x $b/initdb && -x $b/pg_ctl ]]; then
      echo "$b"
      return 0
    fi
  done
  return 1
}

as_owner() {
  if [[ $(id -u) == 0 ]]; then
    runuser -u nobody -- "$@"
  else
    "$@"
  fi
}

cmd=${1:?usage: pg-cluster.sh start|stop DIR | bin}
if [[ $cmd == bin ]]; then
  pg_bin
  exit
fi
dir=${2:?usage: pg-cluster.sh start|stop DIR}
case $cmd in
  start)
    bin=$(pg_bin) || { echo "no PostgreSQL server binaries (initdb, pg_ctl) found" >&2; exit 1; }
    mkdir -p "$dir"
    if [[ $(id -u) == 0 ]]; then chown nobody "$dir"; fi
    chmod 700 "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
      -o "-k $dir -c listen_addresses='' -c fsync=off -c max_connections=200" start >/dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://postgres@/postgres?host=$dir"
    ;;
  stop)
    bin=$(pg_bin) || exit 0
    [[ -d $dir/data ]] && as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *)
    echo "usage: pg-cluster.sh start|stop DIR" >&2
    exit 2
    ;;
esac
