#!/usr/bin/env bash
# Render jobtrail's rsyslog configuration into OUT (default /etc/rsyslog.d/jobtrail), then
# check it with `rsyslogd -N1`. Every @NAME@ of the templates comes from the environment:
#   JOBTRAIL_KAFKA        broker list, host:port[,host:port]            (required)
#   JOBTRAIL_RAW_TOPIC    topic (default jobtrail.raw)
#   JOBTRAIL_CLUSTER      cluster name put in every envelope (default default)
#   JOBTRAIL_SPOOL        rsyslog work dir: queue files, imfile positions (default /var/spool/rsyslog)
#   JOBTRAIL_MAX_DISK     cap of the disk-assisted queue (default 2g)
#   JOBTRAIL_KERNEL_LOG   a kernel log file to follow (default /var/log/kern.log)
#   JOBTRAIL_KMSG         1: read /dev/kmsg with imkmsg (default 1), 0: leave it out
#   JOBTRAIL_SLURM_LOGS   the directory of slurmctld.log / slurmd*.log (default /var/log/slurm)
#   JOBTRAIL_TRAIN_ROOT   root of training logs <root>/<project>/<job>/<attempt>/*.log
#                         (default /var/log/train)
#   JOBTRAIL_NODE         override the node name rsyslog reports (default: the host name)
# Usage: render.sh [OUT]; then include OUT/jobtrail.conf from rsyslog.conf, or run a
# dedicated rsyslogd: rsyslogd -n -f OUT/jobtrail.conf -i OUT/rsyslogd.pid
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-/etc/rsyslog.d/jobtrail}
: "${JOBTRAIL_KAFKA:?set JOBTRAIL_KAFKA to the broker list (host:port)}"
spool=${JOBTRAIL_SPOOL:-/var/spool/rsyslog}
kmsg='#'; [ "${JOBTRAIL_KMSG:-1}" = 1 ] && kmsg=''
extra=''; [ -n "${JOBTRAIL_NODE:-}" ] && extra=" localHostname=\"$JOBTRAIL_NODE\""
mkdir -p "$out/inputs.d" "$spool"
out=$(cd "$out" && pwd)
render() {
  sed -e "s|@BROKER@|$JOBTRAIL_KAFKA|g" \
      -e "s|@TOPIC@|${JOBTRAIL_RAW_TOPIC:-jobtrail.raw}|g" \
      -e "s|@CLUSTER@|${JOBTRAIL_CLUSTER:-default}|g" \
      -e "s|@SPOOL@|$spool|g" \
      -e "s|@MAX_DISK@|${JOBTRAIL_MAX_DISK:-2g}|g" \
      -e "s|@KERNEL_LOG@|${JOBTRAIL_KERNEL_LOG:-/var/log/kern.log}|g" \
      -e "s|@KMSG@|$kmsg|g" \
      -e "s|@SLURM_LOG_DIR@|${JOBTRAIL_SLURM_LOGS:-/var/log/slurm}|g" \
      -e "s|@TRAIN_ROOT@|${JOBTRAIL_TRAIN_ROOT:-/var/log/train}|g" \
      -e "s|@GLOBAL_EXTRA@|$extra|g" \
      -e "s|@CONFDIR@|$out|g" "$1" > "$2"
}
render "$here/jobtrail.conf" "$out/jobtrail.conf"
for f in "$here"/inputs.d/*.conf; do render "$f" "$out/inputs.d/$(basename "$f")"; done
rsyslogd -N1 -f "$out/jobtrail.conf" >&2
echo "$out/jobtrail.conf"
