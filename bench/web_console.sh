#!/usr/bin/env bash
# The web console with 10,000 tasks in a real browser: first paint and the latency of an
# update made by the CLI. Usage: bench/web_console.sh [tasks] [updates]
# Needs Debian's chromium (apt-get install chromium) and the npm registry for
# playwright-core (installed into tests/web/node_modules). Builds the release binary.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
echo "building (release)…" >&2
cargo build -q --release -p warden
[ -d tests/web/node_modules/playwright-core ] || (cd tests/web && npm ci --no-audit --no-fund --silent)
exec node bench/web_console.mjs "$target/release/warden" "$@"
