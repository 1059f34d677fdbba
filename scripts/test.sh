#!/usr/bin/env bash
# Set up .venv with the test tools, then run every check CI runs:
# ruff (format and lint), mypy --strict, and the whole test suite twice:
# on SQLite under coverage (the processes the tests start measured too), then on a throwaway
# PostgreSQL 15 cluster that the tests start themselves. Each pass prints its 25 slowest steps.
# Extra arguments go to both pytest runs (e.g. -x, -k upload); with none, coverage below
# the floor (fail_under in pyproject.toml, the figure in docs/testing.md) fails the run.
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
    "$@" || status=$?
    if [ "$status" -eq 5 ]; then
        echo "pytest ran no test: failing" >&2
        return 1
    fi
    return "$status"
}

# Two test processes (pytest-xdist), a test file each at a time: half the suite is
# in-process tests that keep one core busy. TRACESTORE_TEST_WORKERS=0 runs one process.
parallel=(-n "${TRACESTORE_TEST_WORKERS:-2}" --dist loadfile)

echo "== tests on SQLite, under coverage"
rm -f .coverage .coverage.*
run_pytest .venv/bin/coverage run -m pytest "${parallel[@]}" --durations=25 "$@"
.venv/bin/coverage combine -q
# A partial run (extra arguments) is not held to the floor. The PostgreSQL pass is not
# measured: it would add its cost for a few lines of dialect code.
floor=()
if [ "$#" -gt 0 ]; then floor=(--fail-under=0); fi
total=$(.venv/bin/coverage report --format=total "${floor[@]}") || { echo "$total" >&2; exit 1; }
echo "coverage: ${total}% of tracestore's lines (.venv/bin/coverage report for each module's)"
echo "== tests on PostgreSQL"
TRACESTORE_TEST_POSTGRES=1 run_pytest .venv/bin/pytest "${parallel[@]}" --durations=25 "$@"
