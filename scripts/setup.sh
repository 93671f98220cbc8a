#!/usr/bin/env bash
# Create .venv and install jobtrail with the pinned lock file. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${JOBTRAIL_VENV:-.venv}
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "jobtrail needs Python >= 3.11"'
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -r requirements.lock
"$VENV/bin/python" -m pip install -q --no-deps -e .
