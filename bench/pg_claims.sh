#!/usr/bin/env bash
# Claims per second on PostgreSQL with 1 and 3 runners (threads with a connection each,
# claiming with FOR UPDATE SKIP LOCKED and committing the fenced start of each task):
# offering every task, offering every task from each runner's own offset, and offering
# what `warden run` offers (the next task not seen taken, and two spares).
# Uses WARDEN_TEST_PG_URL when set, else starts a throwaway cluster.
# Usage: bench/pg_claims.sh [TASKS] [cargo flags, e.g. --release]
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-2000}
shift || true
if [[ -z ${WARDEN_TEST_PG_URL:-} ]]; then
  dir=$(mktemp -d /tmp/warden-pg.XXXXXX)
  trap 'scripts/pg-cluster.sh stop "$dir"' EXIT
  WARDEN_TEST_PG_URL=$(scripts/pg-cluster.sh start "$dir")
fi
cargo build -q -p warden-store --example claims "$@"
for runners in 1 3; do
  cargo run -q -p warden-store --example claims "$@" -- "$WARDEN_TEST_PG_URL" "$runners" "$tasks"
done
# The same with each runner starting at its own offset in the candidates.
cargo run -q -p warden-store --example claims "$@" -- "$WARDEN_TEST_PG_URL" 3 "$tasks" spread
# As `warden run` claims: a slot and two spares.
for runners in 1 3; do
  cargo run -q -p warden-store --example claims "$@" -- "$WARDEN_TEST_PG_URL" "$runners" "$tasks" window
done
