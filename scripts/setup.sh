#!/usr/bin/env bash
# Create .venv (if needed) and install tracestore into it with the given extras.
# Usage: scripts/setup.sh server        -> the service
#        scripts/setup.sh server,dev    -> the service and the test tools
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-server}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$python" -m venv .venv
fi
stamp=".venv/.installed-$extras"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
    # constraints.txt holds the versions CI ran (scripts/lock.sh moves it forward).
    .venv/bin/python -m pip install --quiet -c constraints.txt --upgrade pip
    .venv/bin/python -m pip install --quiet -c constraints.txt -e ".[$extras]"
    touch "$stamp"
fi
# Where PYTHONDONTWRITEBYTECODE is set (this machine kind sets it), an editable install's
# modules are compiled from source at every start: ~25 ms of `tracestore --version` and
# ~80 ms of a `tracestore upload` here. Write their bytecode once, as pip does for an
# installed package; Python still recompiles (in memory) a module edited since.
.venv/bin/python -m compileall -q tracestore
