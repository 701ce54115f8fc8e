"""The ``reclock`` command line's surface: help on every option, and the progress that
draws bars on a terminal and prints plain lines elsewhere (no Spark: real argparse, real
rich)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from cdc_core.config import parse_config
from cdc_core.phases import phase
from pipelines.cli import main
from pipelines.run_output import BARS_UP_TO, progress_bar
from tests.assets.test_dagster_surface import SOURCE, deployment, deployment_data

COMMANDS = (["sample"], ["materialize"], ["inspect"], ["retire"], ["snapshot"], ["readers"],
            ["rebuild"], ["demo"], ["config", "check"])


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_option_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = capsys.readouterr().out
    options = text.split("options:", 1)[1]
    # An option without help is a line holding only its flags, followed by another option.
    lines = [line for line in options.splitlines() if line.strip()]
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if line.startswith("  -") and not re.search(r"\S\s{2,}\S", line.strip()):
            assert not following.startswith("  -") and following, f"no help: {line.strip()}"


def test_the_progress_draws_bars_on_a_terminal_and_plain_lines_elsewhere(tmp_path: Path) -> None:
    config = deployment(tmp_path)
    for terminal in (True, False):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=100)
        with progress_bar(config, 3, console):
            with phase(SOURCE, "bind windows"):
                pass
            with phase(SOURCE, "append errors"):  # the run's one batch: every window written
                pass
            with phase(SOURCE, "publish state"):
                pass
        drawn = out.getvalue()
        if terminal:
            assert f"{SOURCE}: publish state" in drawn and "3/3" in drawn
        else:  # one line, said once, with no terminal codes
            assert drawn == f"{SOURCE}: 3/3 windows written\n"


def test_many_sources_show_one_bar_and_a_line_per_tenth_of_them(tmp_path: Path) -> None:
    """Beyond ``BARS_UP_TO`` sources, a terminal draws one bar for them all (naming the
    phase last heard) and plain output a line as each further tenth of the sources has
    all its windows written."""
    data = deployment_data()
    names = [f"t{i:02d}" for i in range(BARS_UP_TO + 8)]
    data["sources"] = [{**data["sources"][0], "name": name, "topic": name} for name in names]
    config = parse_config(data, tmp_path)
    for terminal in (True, False):
        out = io.StringIO()
        console = Console(file=out, force_terminal=terminal, width=100)
        with progress_bar(config, 2, console):
            for name in names:
                with phase(name, "publish state"):
                    pass
        drawn = out.getvalue()
        if terminal:
            assert f"{len(names)} sources: publish state" in drawn
            assert f"{2 * len(names)}/{2 * len(names)}" in drawn
            assert not any(name in drawn for name in names)
        else:
            assert drawn.splitlines() == [
                f"{written}/{len(names)} sources: 2/2 windows written"
                for written in (2, 4, 6, 8, 10, 12, 14, 16, 18, 20)
            ]


def test_a_few_sources_show_a_bar_each_and_one_counting_them_all(tmp_path: Path) -> None:
    """Up to ``BARS_UP_TO`` sources, each has its bar naming its phase, and the overall
    bar counts every source's windows written."""
    data = deployment_data()
    names = ["a", "b", "c"]
    data["sources"] = [{**data["sources"][0], "name": name, "topic": name} for name in names]
    out = io.StringIO()
    with progress_bar(parse_config(data, tmp_path), 2, Console(file=out, force_terminal=True,
                                                                 width=100)):  # fmt: skip
        for name in names:
            with phase(name, "publish state"):
                pass
    drawn = out.getvalue()
    assert all(f"{name}: publish state" in drawn for name in names)
    assert "3 sources: windows written" in drawn and "6/6" in drawn
