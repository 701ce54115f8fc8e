"""The reference pages hold for a demo lake (the session's ``sample_lake``, read only).

Every table and column the tables reference names is in the lake, with the type it
names; the outputs table of that page names only tables and columns a demo source has.
Every ``--json`` command the JSON reference shows prints a document with exactly the keys
of the example shown (at every level), and values derived here from the lake itself.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql.types import StructType

from cdc_core.frontier import iso
from docgen.snippets import ROOT, CodeBlock, code_blocks
from docgen.tables_reference import NOT_IN_A_FRESH_DEMO, demo_tables
from pipelines.cli import main, parse_time

TABLES_PAGE = ROOT / "docs" / "reference" / "tables.md"
JSON_PAGE = ROOT / "docs" / "reference" / "json-output.md"
# Objects whose keys are data (table names, Kafka partitions, a row's columns): their
# values are compared with the example's first value, whatever their keys.
DATA_KEYED = {"tables", "offsets"}


def stored_columns(path: Path) -> list[tuple[str, str]]:
    """A Delta table's columns and Spark SQL types, from its log alone (no Spark job)."""
    schema = StructType.fromJson(json.loads(DeltaTable(str(path)).schema().to_json()))
    return [(field.name, field.dataType.simpleString()) for field in schema.fields]


def test_every_table_and_column_of_the_reference_is_in_a_demo_lake(sample_lake) -> None:
    lake = sample_lake.config.lake
    tables = demo_tables()
    assert {t.path.split("/")[0] for t in tables} >= {s.name for s in sample_lake.config.sources}
    for table in tables:
        path = lake / table.path
        if table.kind in NOT_IN_A_FRESH_DEMO:  # a retire (or a classic source) writes them
            assert not (path / "_delta_log").exists(), table.path
            continue
        assert stored_columns(path) == list(table.columns), table.path


def test_the_outputs_table_names_tables_and_columns_of_a_demo_source(sample_lake) -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.*) \|$", TABLES_PAGE.read_text(), re.MULTILINE)
    named = {name: contents for name, contents in rows}
    assert set(named) == {"remap", "reclocked", "changes", "state", "errors", "history"}
    stored = Counter()
    for source in sample_lake.config.sources:
        for name in named:
            if (sample_lake.config.lake / source.name / name / "_delta_log").exists():
                stored[name] += 1
                columns = {c for c, _ in stored_columns(sample_lake.config.lake / source.name
                                                        / name)}  # fmt: skip
                listed = re.findall(r"\(([\w, .]+)\)", named[name])
                shown = {c.strip() for group in listed for c in group.split(",")}
                shown = {c for c in shown if c.isidentifier()}  # `key...` stands for many
                assert shown <= columns, (source.name, name, shown - columns)
    assert set(stored) == set(named), "each table exists for some demo source"


def json_examples() -> list[CodeBlock]:
    return [b for b in code_blocks(JSON_PAGE) if b.language == "json"]


def same_keys(actual: Any, example: Any, where: str = "$") -> None:
    """``actual`` has exactly the keys of ``example`` at every level; a list's items are
    compared with the example's first item, a null on either side stands for a field that
    does not apply, and scalars keep their JSON type."""
    if actual is None or example is None:
        return
    if isinstance(example, dict):
        assert isinstance(actual, dict), where
        if where.rsplit(".", 1)[-1] in DATA_KEYED:
            for key, value in actual.items():
                same_keys(value, next(iter(example.values())), f"{where}.{key}")
            return
        assert set(actual) == set(example), (where, set(actual) ^ set(example))
        for key in example:
            same_keys(actual[key], example[key], f"{where}.{key}")
    elif isinstance(example, list):
        assert isinstance(actual, list), where
        for index, item in enumerate(actual if example else []):
            same_keys(item, example[0], f"{where}[{index}]")
    else:
        assert type(actual) is type(example) or {type(actual), type(example)} <= {int, float}, (
            where, actual, example
        )


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def documented_args(block: CodeBlock, config: Path) -> list[str]:
    """The block's title as arguments, with the demo's config path replaced by ``config``."""
    args = block.title.removeprefix("reclock ").split()
    return [str(config) if arg == "demo/reclock.yaml" else arg for arg in args]


def test_every_json_document_has_the_documented_shape(
    sample_lake, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # A copy of the sample's folder, where a reader can register (the shared lake stays
    # as it is), and where --out writes.
    folder = tmp_path / "sample"
    skip_landing = shutil.ignore_patterns("landing")
    shutil.copytree(sample_lake.config.lake.parent, folder, ignore=skip_landing)
    (folder / "landing").mkdir()
    config = folder / "reclock.yaml"
    monkeypatch.chdir(tmp_path)
    since = "2026-01-01T00:05:00Z"
    main(["readers", "register", "--config", str(config), "--source", "users",
          "--reader", "audit", "--since", since, "--lease", "2h"])  # fmt: skip
    capsys.readouterr()
    documents = {}
    for block in json_examples():
        args = documented_args(block, config)
        document = run(args, capsys)
        same_keys(document, json.loads(block.text))
        documents[" ".join(args[:1] + (["out"] if "--out" in args else []))] = document
    assert set(documents) == {"inspect", "readers", "snapshot", "snapshot out"}
    end_ms = sample_lake.config.end_ms

    inspected = documents["inspect"]
    (orders,) = inspected["sources"]
    assert (inspected["kind"], inspected["version"], orders["source"]) == ("inspect", 1, "orders")
    assert orders["windows_done"] == (end_ms - sample_lake.config.start_ms) // 60_000 == 8
    assert (orders["upper_ms"], orders["upper"]) == (end_ms + 1, iso(end_ms + 1))
    assert set(orders["tables"]) == {"remap", "reclocked", "changes", "state", "errors"}
    assert orders["transactions"] is not None  # orders is a member of the group shop
    assert orders["caught_up"] and all(p["lag"] == 0 for p in orders["partitions"])

    (users,) = documents["readers"]["sources"]
    (audit,) = [h for h in users["holds"] if h["holder"] == "audit"]
    assert (audit["table"], audit["kind"], audit["live"]) == ("changes", "reader", True)
    assert (audit["since"], audit["since_ms"]) == (since, parse_time(since))

    snapshot = documents["snapshot"]
    as_of = parse_time(since)
    changes = DeltaTable(str(folder / "lake" / "users" / "changes")).to_pyarrow_table()
    columns = [c for c in changes.column_names if c not in ("time", "diff")]
    counts = Counter()
    for row in changes.to_pylist():
        if row["time"] <= as_of:
            counts[tuple(row[c] for c in columns)] += row["diff"]
    assert snapshot["rows"] == sum(n for n in counts.values() if n > 0) > 1
    assert snapshot["truncated"] and len(snapshot["shown"]) == 1
    assert tuple(snapshot["shown"][0][c] for c in columns) in counts

    written = documents["snapshot out"]
    assert (written["written_to"], written["format"]) == ("users-at-5", "delta")
    assert DeltaTable(str(tmp_path / "users-at-5")).to_pyarrow_table().num_rows == snapshot["rows"]
