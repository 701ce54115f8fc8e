"""Where a rebuilt source is built, and the swap that puts it in place of the old one.

A rebuild builds a source's tables under ``<lake>/.rebuild/<source>`` while the old ones
stay in ``<lake>/<source>``, untouched and readable. Once the new ones are complete, the
swap moves the old folder to ``<lake>/.replaced/<source>-<time>`` (kept until the user
removes it) and the new one into its place. Each move is a rename in a local lake; on an
object store, which has no rename, a copy of every object and then a delete of the
originals, ordered so that a Delta reader of either folder meanwhile finds a complete
version or no table (``files.move_folder``).

Invariant: a swap marker (``<lake>/.rebuild/<source>.swap``) names the step under way
from before the first move until after the last. While it exists every open of the
source refuses (RebuildUnfinished), so no run writes to a folder half moved or creates
empty tables in its place, until ``reclock rebuild`` is run again and finishes the swap
from the step the marker names (each move is repeated safely).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from cdc_core.phases import phase
from cdc_core.storage import Location, LocationLike, files, located

STAGING = ".rebuild"
REPLACED = ".replaced"
ASIDE, IN = "move old tables aside", "move rebuilt tables in"


class RebuildUnfinished(RuntimeError):
    """A source's swap was cut short: its folder may be missing or half moved."""


def staging_lake(lake: LocationLike) -> Location:
    """The lake in which rebuilt sources are built (``<lake>/.rebuild``)."""
    return located(lake) / STAGING


def _marker(lake: LocationLike, name: str) -> str:
    return str(staging_lake(lake) / f"{name}.swap")


def mid_swap(lake: LocationLike, name: str) -> bool:
    """Whether a swap of ``name`` was started and has not finished."""
    return files.exists(_marker(lake, name))


def check_not_mid_swap(lake: LocationLike, name: str) -> None:
    """Refuse to open a source whose swap was cut short."""
    if mid_swap(lake, name):
        raise RebuildUnfinished(
            f"source {name!r} is being rebuilt: its new tables wait in "
            f"{staging_lake(lake) / name}; run `reclock rebuild --source {name}` to finish"
        )


def swap_in(lake: LocationLike, name: str, now_ms: int) -> str | None:
    """Move the old tables of ``name`` aside (if any) and the rebuilt ones into place, or
    finish a swap cut short; returns where the old ones are kept."""
    lake = located(lake)
    live, rebuilt, marker = str(lake / name), str(staging_lake(lake) / name), _marker(lake, name)
    if files.exists(marker):
        step = json.loads(files.read_bytes(marker))
    else:
        stamp = datetime.fromtimestamp(now_ms / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
        kept = str(lake / REPLACED / f"{name}-{stamp}") if files.exists(live) else None
        step = {"step": ASIDE, "kept": kept}
        files.replace_file(marker, json.dumps(step).encode())
    if step["step"] == ASIDE:
        if step["kept"] is not None:
            with phase(name, ASIDE):
                files.move_folder(live, step["kept"])
        step = {**step, "step": IN}
        files.replace_file(marker, json.dumps(step).encode())
    with phase(name, IN):
        files.move_folder(rebuilt, live)
    files.delete_file(marker)
    return step["kept"]
