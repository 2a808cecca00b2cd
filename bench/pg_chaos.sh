#!/usr/bin/env bash
# Claims under chaos on PostgreSQL: 10 runner processes claim, start, hold and finish
# tasks (fenced commits, 2 s leases) while a driver SIGKILLs a random runner every
# 0.5–3 s and restarts it. At the end it checks, from the event log and the runners'
# logs, that no task was claimed or done twice and that no live runner lost a lease,
# prints a table, and exits 1 when a check fails (crates/store/examples/chaos.rs).
# Uses WARDEN_TEST_PG_URL when set, else starts a throwaway cluster.
# Usage: bench/pg_chaos.sh [SECONDS (default 600)] [SEED (default: from the clock)]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
seed=${2:-}
if [[ -z ${WARDEN_TEST_PG_URL:-} ]]; then
  dir=$(mktemp -d /tmp/warden-pg.XXXXXX)
  trap 'scripts/pg-cluster.sh stop "$dir"' EXIT
  WARDEN_TEST_PG_URL=$(scripts/pg-cluster.sh start "$dir")
fi
cargo build -q --release -p warden-store --example chaos
cargo run -q --release -p warden-store --example chaos -- "$WARDEN_TEST_PG_URL" "$secs" ${seed:+"$seed"}
