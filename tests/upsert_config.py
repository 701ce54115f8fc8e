"""The small config many tests run: one upsert source ``users`` of one-minute windows
(``id`` key, ``name`` value, event-time), written to ``<workdir>/reclock.yaml``, with
its landing folder ``<workdir>/landing/users`` created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cdc_core.spark import DRIVER_JAVA_OPTIONS, QUICK_START_OPTIONS


def write_upsert_config(
    workdir: Path,
    *,
    start: str = "2026-01-01T00:00:00Z",
    end: str | None = None,
    source: dict[str, Any] | None = None,
    **top: Any,
) -> Path:
    """Write the config; ``source``: more options of ``users``, ``top``: more top-level
    settings (``end`` when given). Returns the file's path."""
    config = {
        "lake": "lake", "landing": "landing", "window": "1m", "start": start,
        **({"end": end} if end is not None else {}),
        # A run in a process of its own is short here: its driver compiles with C1 alone
        # (as a one-window run's does); a session that is running already ignores it.
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": "4",
                                                 DRIVER_JAVA_OPTIONS: QUICK_START_OPTIONS}},
        "sources": [{"name": "users", "topic": "users", "format": "json",
                     "key": {"id": "bigint"}, "value": {"name": "string"},
                     "envelope": "upsert", "reclock": "event-time", **(source or {})}],
        **top,
    }  # fmt: skip
    (workdir / "landing" / "users").mkdir(parents=True, exist_ok=True)
    path = workdir / "reclock.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
