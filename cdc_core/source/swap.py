"""Where a rebuilt source is built, and the swap that puts it in place of the old one.

A rebuild builds a source's tables under ``<lake>/.rebuild/<source>`` while the old ones
stay in ``<lake>/<source>``, untouched and readable. Once the new ones are complete, the
swap moves the old folder to ``<lake>/.replaced/<source>-<time>`` (kept until the user
removes it) and the new one into its place: two renames.

Invariant: ``<lake>/<source>`` holds complete tables of one configuration, except between
the two renames, when it is missing while the rebuilt tables wait under ``.rebuild``; every
open of the source then refuses (RebuildUnfinished), so no run creates empty tables there,
until ``reclock rebuild`` is run again and finishes the swap.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from cdc_core.phases import phase
from cdc_core.storage import LocationLike, files, located

STAGING = ".rebuild"
REPLACED = ".replaced"


class RebuildUnfinished(RuntimeError):
    """A source's folder is missing while its rebuilt tables wait to be swapped in."""


def staging_lake(lake: Path) -> Path:
    """The lake in which rebuilt sources are built (``<lake>/.rebuild``)."""
    return Path(lake) / STAGING


def check_not_mid_swap(lake: LocationLike, name: str) -> None:
    """Refuse to open a source caught between the two renames of its swap."""
    waiting = files.join(str(located(lake)), STAGING, name)
    if not files.exists(files.join(str(located(lake)), name)) and files.exists(waiting):
        raise RebuildUnfinished(
            f"source {name!r} is being rebuilt: its new tables wait in "
            f"{waiting}; run `reclock rebuild --source {name}` to finish"
        )


def swap_in(lake: Path, name: str, now_ms: int) -> Path | None:
    """Move the old tables of ``name`` aside (if any) and the rebuilt ones into place;
    returns where the old ones are kept. Each rename is atomic and durable."""
    live, rebuilt = Path(lake) / name, staging_lake(lake) / name
    kept = None
    if live.exists():
        stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
        kept = Path(lake) / REPLACED / f"{name}-{stamp}"
        with phase(name, "move old tables aside"):
            kept.parent.mkdir(parents=True, exist_ok=True)
            os.rename(live, kept)
            _sync(kept.parent)
    with phase(name, "move rebuilt tables in"):
        os.rename(rebuilt, live)
        _sync(Path(lake))
    return kept


def _sync(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
