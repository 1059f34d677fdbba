#!/usr/bin/env bash
# Set up .venv with the test tools, then run every check CI runs:
# ruff (format and lint), mypy --strict, and the whole test suite twice:
# on SQLite, then on a throwaway PostgreSQL 15 cluster that the tests start themselves.
# Extra arguments go to both pytest runs (e.g. -x, -k upload).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh server,dev
if [ ! -x /usr/bin/chromium ]; then
    # The web page's browser tests drive Debian's chromium (Playwright never downloads one).
    echo "== installing Debian's chromium for the browser tests"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi

echo "== ruff"
.venv/bin/ruff format --check tracestore tests bench
.venv/bin/ruff check tracestore tests bench
echo "== mypy --strict"
.venv/bin/mypy

run_pytest() {
    # pytest exits 5 when it collected no test: for us that is a failure, not a pass.
    local status=0
    .venv/bin/pytest "$@" || status=$?
    if [ "$status" -eq 5 ]; then
        echo "pytest ran no test: failing" >&2
        return 1
    fi
    return "$status"
}

echo "== tests on SQLite"
run_pytest "$@"
echo "== tests on PostgreSQL"
TRACESTORE_TEST_POSTGRES=1 run_pytest "$@"
