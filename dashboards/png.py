"""The job timeline dashboard drawn to a PNG, from the dashboard's own queries (expanded as
the plugin would and run on the store), so a reviewer sees what Grafana would show without
a Grafana: `jobtrail timeline JOB --project P --png out.png`."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from dashboards import job as board
from dashboards.interpolate import ALL, Chosen, Values, expand

_SOURCES = ["scheduler", "network", "storage", "node", "job", "change", "operator"]
_COLOURS = {"scheduler": "#5470c6", "network": "#ee6666", "storage": "#fac858",
            "node": "#91cc75", "job": "#73c0de", "change": "#9a60b4", "operator": "#888888"}


def _rows(store: Any, sql: str, values: Values, start: datetime,
          end: datetime) -> list[dict[str, Any]]:
    return store._dicts(expand(sql, values, start, end, 60))  # type: ignore[no-any-return]


def render(store: Any, project: str, job: str, out: Path, attempt: str = "all") -> dict[str, int]:
    """Write the PNG; returns how many rows each panel drew (the test asserts them)."""
    import matplotlib.pyplot as plt

    fig, counts = figure(store, project, job, attempt)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return counts


def figure(store: Any, project: str, job: str, attempt: str = "all") -> tuple[Any, dict[str, int]]:
    """The figure and the rows each panel drew. Its artists carry gids a test reads:
    `attempt-N` (the attempt's band, from its start, not its submission), `steps-attempt-N`
    (the step line, one per attempt, so it breaks between them) and `failure-INCIDENT-N`
    (the marker at the attempt's failure, labelled with what failed and why)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    span = store._dicts("SELECT min(time) AS lo, max(time) AS hi FROM job_timeline FINAL "
                        "WHERE project = {p:String} AND job_id = {j:String}", p=project, j=job)
    if not span or span[0]["lo"] is None or span[0]["lo"].year < 2000:
        raise ValueError(f"no timeline rows for {project}/{job}")
    start = span[0]["lo"] - timedelta(minutes=5)
    end = span[0]["hi"] + timedelta(minutes=5)
    values: Values = {"project": project, "job": job,
                      "attempt": Chosen(ALL) if attempt == "all" else attempt}
    bands = _rows(store, board.BANDS, values, start, end)
    steps = _rows(store, board.STEPS, values, start, end)
    checkpoints = _rows(store, board.CHECKPOINTS, values, start, end)
    phases = _rows(store, board.ATTEMPTS, values, start, end)
    spans = [r for r in phases if r["parentSpanID"] == ""]
    running = {r["parentSpanID"]: r for r in phases if r["spanID"].endswith("-running")}
    failures = [r for r in _rows(store, board.INCIDENTS, values, start, end)
                if r["role"] == "failed" and r["failed_at"] is not None]
    incidents = _rows(store, board.ANNOTATIONS, values, start, end)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14, 7), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    sources = [s for s in _SOURCES if any(r["source"] == s for r in bands)]
    for i, source in enumerate(sources):
        times = [r["time"] for r in bands if r["source"] == source]
        top.scatter(times, [i] * len(times), s=18, color=_COLOURS[source], label=source,
                    zorder=3)
    top.set_yticks(range(len(sources)), sources)
    top.set_ylim(-0.8, max(len(sources), 1) - 0.2)
    for s in spans:
        ran = running.get(s["spanID"])
        if ran is None:  # never started: nothing ran, no band
            continue
        begin = ran["startTime"]
        finish = begin + timedelta(milliseconds=int(ran["duration"]))
        colour = "#f4cccc" if s["statusCode"] == 2 else "#d9ead3"
        number = s["serviceName"].removeprefix("attempt ")
        for axis in (top, bottom):
            axis.axvspan(begin, finish, color=colour, alpha=0.5, zorder=0,
                         gid=f"attempt-{number}")
        top.text(begin, len(sources) - 0.45, f"{s['serviceName']}: {s['operationName']}",
                 fontsize=8, va="bottom")
    for f in failures:
        label = (f"attempt {f['attempt']} failed {f['failed_at']:%H:%M:%S}: {f['severity']} "
                 f"{f['class']} on {f['entity']} -> {f['owner']}")
        for axis in (top, bottom):
            axis.axvline(f["failed_at"], color="#cc0000", linewidth=1.5, zorder=4,
                         gid=f"failure-{f['incident']}-{f['attempt']}")
        top.text(f["failed_at"], -0.7, " " + label, color="#cc0000", fontsize=8, va="bottom",
                 gid=f"failure-label-{f['incident']}-{f['attempt']}")
    top.set_title(f"{project}/{job}: across systems, attempts and incidents")
    top.legend(loc="lower left", fontsize=8, ncols=len(sources) or 1)
    for n, series in enumerate(sorted({r["series"] for r in steps},
                                      key=lambda a: int(a.removeprefix("attempt ")))):
        mine = [r for r in steps if r["series"] == series]
        bottom.plot([r["time"] for r in mine], [r["step"] for r in mine], color="#5470c6",
                    label="step" if n == 0 else "_nolegend_",
                    gid=f"steps-{series.replace(' ', '-')}")
    bottom.scatter([r["time"] for r in checkpoints], [r["checkpoint"] for r in checkpoints],
                   marker="D", color="#333333", zorder=3, label="checkpoint saved/restored")
    bottom.set_ylabel("step")
    bottom.legend(loc="upper left", fontsize=8)
    bottom.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    bottom.set_xlabel("time (UTC)")
    fig.tight_layout()
    return fig, {"bands": len(bands), "steps": len(steps), "checkpoints": len(checkpoints),
                 "attempts": len(spans), "incidents": len(incidents),
                 "failures": len(failures)}
