"""Parsing a config: validate already-read data and return the model, nothing else.

Validation reports every problem of a file at once, one ``<field path>: <problem>`` line
each, in the file's own terms (pydantic's errors translated: a "did you mean" hint for an
unknown key). Parsing reads no file, probes no storage and sets no process setting:
``cdc_core.config.loading`` does those.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import (
    ValidationError,
)
from pydantic_core import ErrorDetails

from cdc_core.config.model import Config, config_schema
from cdc_core.config.problems import ConfigError, ConfigProblem, describe
from cdc_core.config.rules import config_problems

ROOT = "<config>"  # the field path of the whole file


def parse_config(data: Any, base_dir: Path) -> Config:
    """Validate an already-read config; relative paths resolve against ``base_dir``.

    Raises ConfigError listing every problem found: the fields' own, else the cross-field
    rules' (``rules.config_problems``), judged on the built model. It reads no file and
    changes nothing outside the model it returns: ``load_config`` judges the storage
    settings against the environment and makes them the process's (``use_config`` does
    that alone).
    """
    try:
        config = Config.model_validate(data, context={"base_dir": Path(base_dir)})
    except ValidationError as error:
        raise ConfigError([_translate(detail) for detail in error.errors()]) from None
    problems = config_problems(config)
    if problems:
        raise ConfigError([ConfigProblem(_schema_at(p.where)[0], p.text) for p in problems])
    return config


# --- pydantic's errors as config problems ----------------------------------------------------


def _translate(detail: ErrorDetails) -> ConfigProblem:
    """A pydantic error as a problem in the file's own terms."""
    field, _ = _schema_at(detail["loc"])
    kind, value = detail["type"], detail["input"]
    if kind == "missing":
        return ConfigProblem(field, "is required")
    if kind == "extra_forbidden":
        _, section = _schema_at(detail["loc"][:-1])
        keys = list(section.get("properties", {}))
        near = difflib.get_close_matches(str(detail["loc"][-1]), keys, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return ConfigProblem(field, f"unknown key{hint} (expected: {', '.join(keys)})")
    if kind in ("model_type", "dict_type"):
        return ConfigProblem(field, f"must be a mapping (got {describe(value)})")
    if kind in ("list_type", "tuple_type"):
        return ConfigProblem(field, f"must be a list (got {describe(value)})")
    if kind == "string_type":
        return ConfigProblem(field, f"must be a string (got {describe(value)})")
    return ConfigProblem(field, detail["msg"])


def _schema_at(loc: tuple[str | int, ...]) -> tuple[str, dict[str, Any]]:
    """The field path (``sources[1].key.id``) of a pydantic location, and the schema of the
    field it names: the schema tells list indexes from mapping keys, which may be numbers."""
    schema = config_schema()
    path, node = "", _resolve(schema)
    for part in loc:
        if part == "[key]":  # pydantic's marker of a bad mapping key: the key is the field
            continue
        if "items" in node:
            path, node = f"{path}[{part}]", node["items"]
        else:
            path = f"{path}.{part}" if path else str(part)
            values = node.get("additionalProperties")  # a schema, or a bool
            default = values if isinstance(values, dict) else {}
            node = node.get("properties", {}).get(str(part), default)
        node = _resolve(node)
    return path or ROOT, node


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and the non-null branch of an optional field."""
    if "$ref" in node:
        return _resolve(config_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    branches = [branch for branch in node.get("anyOf", []) if branch.get("type") != "null"]
    return _resolve(branches[0]) if len(branches) == 1 else node
