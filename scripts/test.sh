#!/usr/bin/env bash
# Set up from scratch and pass every check: lint, types, and all tests, including the ones
# against a real Kafka broker (jars fetched from Maven Central, started by the test session).
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_apt+=(maven)
# the postmortem page is tested in a real browser (Playwright drives Debian's chromium)
[ -x /usr/bin/chromium ] || need_apt+=(chromium)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
  else
    echo "missing ${need_apt[*]}: install them (Debian: sudo apt-get install ${need_apt[*]})" >&2
    exit 1
  fi
fi
# live sources (rsyslog + omkafka, Prometheus + Alertmanager): the tests start and stop the
# daemons by pid; policy-rc.d (exit 101) keeps postinst from starting system services
live_apt=()
[ -e /usr/lib/x86_64-linux-gnu/rsyslog/omkafka.so ] || live_apt+=(rsyslog rsyslog-kafka)
command -v prometheus >/dev/null 2>&1 || live_apt+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || live_apt+=(prometheus-alertmanager)
if [ ${#live_apt[@]} -gt 0 ] && [ "$(id -u)" = 0 ]; then
  made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends "${live_apt[@]}"
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
# Slurm 22.05 for tests/integration/test_slurm_*.py (the tests start and stop the daemons);
# policy-rc.d keeps postinst from starting them as services on a machine without systemd
if ! command -v slurmctld >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  made_policy=
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d; made_policy=1; }
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    --no-install-recommends slurm-wlm slurmdbd munge mariadb-server
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
bash scripts/setup.sh --dev
V=${JOBTRAIL_VENV:-.venv}/bin
"$V/jobtrail" dev kafka fetch
"$V/ruff" check .
"$V/mypy"
# browser tests save their screenshots here (the review page in each state)
export JOBTRAIL_TEST_ARTEFACTS="${JOBTRAIL_TEST_ARTEFACTS:-$PWD/test-artefacts}"
"$V/python" -m pytest -p no:cacheprovider "$@"
