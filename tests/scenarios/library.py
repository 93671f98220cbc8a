"""The incident scenario library lives in `jobtrail.learn.scenarios` (a postmortem's failure sample
is checked by the same runner, from the CLI); the stories themselves are in `incidents/`."""

from jobtrail.learn.scenarios import (
    LIBRARY,
    Scenario,
    check,
    check_incident,
    library,
    load,
    offset,
    run,
    topology,
    wiring,
)

__all__ = ["LIBRARY", "Scenario", "check", "check_incident", "library", "load", "offset",
           "run", "topology", "wiring"]
