#!/usr/bin/env bash
# Set up, then run the main job on the embedded default (no Kafka, chDB under ./var):
# load the bundled 64-node sample scenario and print its cross-system timeline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${JOBTRAIL_VENV:-.venv}/bin/jobtrail" demo "$@"
