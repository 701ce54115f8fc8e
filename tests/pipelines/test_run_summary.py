"""The summary a run prints: a line per source for a few, totals and the exceptions by
name for a database's worth."""

from __future__ import annotations

from pipelines.run_summary import LINES_UP_TO, summary_lines

UPPER, EARLIER = "[2026-12-06T22:17:00.001Z]", "[2026-12-06T22:16:00.001Z]"


def _sources(count: int, **unusual: tuple[str, int]) -> dict[str, dict[str, object]]:
    """``count`` sources at ``UPPER`` with 10 state rows and no errors, but those named in
    ``unusual`` (name: (upper, current errors))."""
    names = [f"table_{index:03d}" for index in range(count)]
    return {
        name: {"windows": 11 if unusual.get(name, (UPPER, 0))[0] == UPPER else 10,
               "upper": unusual.get(name, (UPPER, 0))[0], "state rows": 10,
               "current errors": unusual.get(name, (UPPER, 0))[1]}
        for name in names
    }  # fmt: skip


def test_a_few_sources_get_a_line_each() -> None:
    lines = summary_lines(_sources(LINES_UP_TO, table_003=(EARLIER, 2)))
    assert len(lines) == 1 + LINES_UP_TO
    assert lines[0].split() == ["source", "windows", "upper", "state", "rows", "errors"]
    assert lines[4].split() == ["table_003", "10", EARLIER, "10", "2"]


def test_many_sources_get_totals_and_only_those_that_need_a_look_by_name() -> None:
    lines = summary_lines(_sources(
        200, table_010=(EARLIER, 0), table_011=(EARLIER, 4), table_150=(UPPER, 1_500),
    ))  # fmt: skip
    assert lines == [
        f"200 sources: 198 at upper {UPPER}; state rows 2,000 in all; current errors 1,504 in all",
        "2 sources at another upper:",
        f"  table_010 {EARLIER} (10 windows)",
        f"  table_011 {EARLIER} (10 windows)",
        "2 sources with current errors:",
        "  table_011 (4)",
        "  table_150 (1,500)",
        "each source: reclock inspect --config CONFIG [--source NAME]",
    ]


def test_a_long_list_of_sources_that_need_a_look_is_cut_with_how_many_more() -> None:
    failing = {f"table_{index:03d}": (UPPER, 1) for index in range(0, 90, 2)}
    lines = summary_lines(_sources(90, **failing))
    start = lines.index("45 sources with current errors:")
    assert lines[start + 1 : start + 1 + LINES_UP_TO] == [
        f"  table_{index:03d} (1)" for index in range(0, 2 * LINES_UP_TO, 2)
    ]
    assert lines[start + 1 + LINES_UP_TO] == "  ... and 25 more"
    assert not any("another upper" in line for line in lines)
