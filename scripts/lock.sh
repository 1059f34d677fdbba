#!/usr/bin/env bash
# Move the lock forward: install tracestore with every extra into a throwaway venv at the
# newest versions pyproject.toml allows (no constraints), and write what got installed to
# constraints.txt, which scripts/setup.sh (so both README commands) installs from.
# Then run `bash scripts/test.sh` and commit constraints.txt with what the tests needed.
# `scripts/lock.sh --check` only prints which locked versions have a newer release allowed.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
venv=$(mktemp -d)/venv
trap 'rm -rf "$(dirname "$venv")"' EXIT
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -e ".[server,dev]"
fresh=$("$venv/bin/python" -m pip freeze --all --exclude-editable | grep -v -e "^tracestore" -e "^setuptools==" | sort -f)
if [ "${1:-}" = "--check" ]; then
    diff <(sort -f constraints.txt | grep -v '^#') <(echo "$fresh") || true
    exit 0
fi
{
    echo "# The versions CI ran: scripts/setup.sh installs with -c constraints.txt."
    echo "# Written by scripts/lock.sh (which says how to move it forward); do not edit by hand."
    echo "$fresh"
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) packages"
