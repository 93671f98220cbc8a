"""Build every dashboard to JSON (`jobtrail dashboards build`) and load the committed JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dashboards import entity, fleet, incident, job, oncall
from dashboards.common import build as to_dict

OUT = Path(__file__).with_name("json")
BUILDERS: dict[str, Callable[[], Any]] = {"job": job.build, "incident": incident.build,
                                          "fleet": fleet.build, "entity": entity.build,
                                          "oncall": oncall.build}


def built() -> dict[str, dict[str, Any]]:
    return {name: to_dict(make()) for name, make in BUILDERS.items()}


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def write(out: Path = OUT) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, board in built().items():
        path = out / f"{name}.json"
        path.write_text(render(board))
        paths.append(path)
    return paths


def committed(out: Path = OUT) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
