"""Planning a run: the windows the sensor asks for, worked out by hand (no JVM)."""

from __future__ import annotations

from pathlib import Path

from cdc_core.app.plan import windows_to_ask
from cdc_core.config import parse_config
from cdc_core.frontier import TimeFrontier

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MINUTE = 60_000
CONFIG = parse_config(
    {
        "lake": "lake", "landing": "landing", "window": "1m", "start": "2026-01-01T00:00:00Z",
        "sources": [{"name": "users", "topic": "users", "key": {"id": "bigint"},
                     "value": {"name": "string"}, "envelope": "upsert",
                     "reclock": "event-time"}],
    },
    Path("/unused"),
)  # fmt: skip
NOW = START + 10 * MINUTE + 30_000  # ten windows closed, the eleventh open
HELD = TimeFrontier.at(START + 3 * MINUTE + 1)  # outputs hold every time through 00:03


def test_new_files_ask_for_every_closed_window_the_outputs_do_not_hold() -> None:
    asked = windows_to_ask(CONFIG, HELD, NOW, new_files=True, asked_through=START + 8 * MINUTE)
    assert asked == (
        ("2026-01-01T00:03:00", START + 4 * MINUTE),
        ("2026-01-01T00:09:00", START + 10 * MINUTE),
    )


def test_without_new_files_only_windows_closed_since_the_last_ask_are_asked_for() -> None:
    asked = windows_to_ask(CONFIG, HELD, NOW, new_files=False, asked_through=START + 8 * MINUTE)
    assert asked == (
        ("2026-01-01T00:08:00", START + 9 * MINUTE),
        ("2026-01-01T00:09:00", START + 10 * MINUTE),
    )
    caught_up = START + 10 * MINUTE
    assert windows_to_ask(CONFIG, HELD, NOW, new_files=False, asked_through=caught_up) is None


def test_finished_outputs_and_windows_before_the_partitions_are_never_asked_for() -> None:
    finished = TimeFrontier.empty()
    assert windows_to_ask(CONFIG, finished, NOW, new_files=True, asked_through=0) is None
    # A day on, the partitions start six hours back (the default launchable span), on the
    # hour: 18:00 the first day, so nothing before it is asked for, however little is held.
    day_on = START + 24 * 60 * MINUTE + 30_000
    asked = windows_to_ask(CONFIG, HELD, day_on, new_files=True, asked_through=0)
    assert asked is not None
    assert asked[0] == ("2026-01-01T18:00:00", START + 18 * 60 * MINUTE + MINUTE)
