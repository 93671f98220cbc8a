"""The `jobtrail` command line: the root group and the core commands in `main`, one module per
command group beside it (ingest, incidents, postmortem, alerts, grafana, dev)."""
