"""What the cluster learns and replays: the bundled sample, the scenario library and its
runner, and the lessons of a postmortem (failure sample, monitor, runbook entry)."""
