"""The documentation's config snippets and commands hold for the code (no Spark).

Every YAML block of a page (and of the README) is a config that ``reclock config check``
accepts: titled ``reclock.yaml``, it is a whole config; titled ``reclock.yaml (part)``, it
is checked inside the demo's config (a list is added to its sources, a mapping replaces
its top-level keys); any other title names a file that is not a reclock config. Every
``reclock`` command of a shell block (and every command a JSON block's title names)
parses with the real argument parser, optional parts in ``[...]`` included, and so does
every ``python -m benchmarks.NAME`` command of a shell block, with that benchmark's.
"""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path

import pytest
import yaml

from cdc_core.config import ConfigError, load_config
from docgen.snippets import CodeBlock, all_blocks
from pipelines.cli import build_parser
from pipelines.sample import sample_config_yaml, write_payment_schemas
from tests.test_documented_options import schemas

WHOLE, PART = "reclock.yaml", "reclock.yaml (part)"
# YAML files the pages show that are not reclock configs, by their block's title.
OTHER_FILES: frozenset[str] = frozenset()
CONFIG_BLOCKS = all_blocks("yaml")
SHELL_BLOCKS = all_blocks("bash", "sh")
# `reclock` (or `.venv/bin/reclock`) where a command starts: after a line start, an
# environment assignment, `&&`, `;` or `|`.
COMMAND = re.compile(r"(?:^|[;&|]\s*|\s)(?:\S*/)?reclock\s+(?P<args>[^;&|#]*)")
BENCHMARK = re.compile(r"(?:^|\s)(?:\S*/)?python -m benchmarks\.(?P<name>\w+)(?P<args>[^;&|#]*)")


def whole_config(block: CodeBlock) -> dict:
    """The config the block stands for: itself, or the demo's config with it applied."""
    data = yaml.safe_load(block.text)
    if block.title == WHOLE:
        return data
    config = yaml.safe_load(sample_config_yaml())
    if isinstance(data, list):
        config["sources"] += data
    elif data is not None:
        config.update(data)
    return config


@pytest.mark.parametrize("block", CONFIG_BLOCKS, ids=[b.where for b in CONFIG_BLOCKS])
def test_every_config_snippet_passes_config_check(block: CodeBlock, tmp_path: Path) -> None:
    assert block.title in (WHOLE, PART) or block.title in OTHER_FILES, (
        f'{block.where}: title a YAML block "{WHOLE}", "{PART}", or a file of OTHER_FILES'
    )
    if block.title in OTHER_FILES:
        return
    # The schema files the documented configs name (the demo's, for a part of it).
    if block.title == WHOLE:
        schemas(tmp_path)
    else:
        write_payment_schemas(tmp_path / "schemas")
    path = tmp_path / "reclock.yaml"
    path.write_text(yaml.safe_dump(whole_config(block)), encoding="utf-8")
    try:
        load_config(path)
    except ConfigError as error:
        pytest.fail(f"{block.where}: reclock config check refuses it:\n{error}")


def documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``reclock`` command the pages show, as ``(where, arguments)``."""
    found = []
    for block in SHELL_BLOCKS:
        text = block.text.replace("\\\n", " ")
        for offset, line in enumerate(text.splitlines()):
            for match in COMMAND.finditer(line):
                found.append((f"{block.where}+{offset}", match.group("args")))
    for block in all_blocks("json"):
        if block.title and block.title.startswith("reclock "):
            found.append((f"{block.where} (title)", block.title.removeprefix("reclock ")))
    return [(where, arguments(args)) for where, args in found]


def arguments(shown: str) -> list[str]:
    """A command's arguments as shown, optional parts in ``[...]`` included."""
    return shlex.split(re.sub(r"\[(--[^\]]*)\]", r"\1", shown))


def documented_benchmarks() -> list[tuple[str, str, list[str]]]:
    """Every benchmark command the pages' shell blocks show, as ``(where, module,
    arguments)``."""
    return [
        (f"{block.where}+{offset}", match.group("name"), arguments(match.group("args")))
        for block in SHELL_BLOCKS
        for offset, line in enumerate(block.text.replace("\\\n", " ").splitlines())
        for match in BENCHMARK.finditer(line)
    ]


def test_the_pages_show_commands() -> None:
    commands = {args[0] for _, args in documented_commands()}
    assert {"materialize", "inspect", "snapshot", "readers", "config", "demo"} <= commands


@pytest.mark.parametrize(("where", "args"), documented_commands(),
                         ids=[where for where, _ in documented_commands()])  # fmt: skip
def test_every_command_shown_exists_with_its_options(
    where: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: reclock {shlex.join(args)}: {capsys.readouterr().err}")


@pytest.mark.parametrize(("where", "name", "args"), documented_benchmarks(),
                         ids=[where for where, _, _ in documented_benchmarks()])  # fmt: skip
def test_every_benchmark_command_shown_exists_with_its_options(
    where: str, name: str, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    try:
        module.arguments().parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: python -m benchmarks.{name} {shlex.join(args)}: "
                    f"{capsys.readouterr().err}")  # fmt: skip
