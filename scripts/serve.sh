#!/usr/bin/env bash
# Set up .venv and run the service on its embedded default (SQLite + ./tracestore-data).
# Extra arguments go to `tracestore serve` (e.g. --port 9000, --data-dir /srv/traces).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh server
exec .venv/bin/tracestore serve "$@"
