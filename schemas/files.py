"""Configuration files read into pydantic models, with errors that name the file and key."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from schemas import documents

M = TypeVar("M", bound=BaseModel)


def load_yaml(path: Path, model: type[M], error: type[ValueError], what: str = "") -> M:
    """Parse and validate; `error` names the file and the first failing key
    (`nodes.node-001.nics: ...`)."""
    try:
        data = documents.load_yaml(path.read_text())
    except (OSError, yaml.YAMLError, documents.DocumentRefused) as exc:
        raise error(f"{path}: {f'cannot read {what}: ' if what else ''}{exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise error(f"{path}: {where}: {first['msg']}") from None
