#!/usr/bin/env bash
# Create .venv and install jobtrail with the pinned lock file. Idempotent.
#   bash scripts/setup.sh         the service's runtime only (requirements.lock)
#   bash scripts/setup.sh --dev   plus the test, lint and type-check tooling (requirements-dev.lock)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${JOBTRAIL_VENV:-.venv}
LOCK=requirements.lock
[ "${1:-}" = "--dev" ] && LOCK=requirements-dev.lock
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "jobtrail needs Python >= 3.11"'
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# grafana-client pulls urllib3-future, whose wheel replaces urllib3 for the whole venv
# (grafana-client issue #179); built from source with URLLIB3_NO_OVERRIDE=1 it installs beside it
URLLIB3_NO_OVERRIDE=1 "$VENV/bin/python" -m pip install -q --no-binary=urllib3-future -r "$LOCK"
"$VENV/bin/python" -m pip install -q --no-deps -e .
