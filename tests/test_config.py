"""Config loading and validation: every rule rejects with a message naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from pydantic import ValidationError
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from cdc_core.calendar import launch_step_ms
from cdc_core.config import (
    ConfigError,
    SparkSettings,
    config_schema,
    config_schema_json,
    load_config,
    parse_config,
)
from cdc_core.frontier import OffsetFrontier
from cdc_core.vocabulary import Envelope, Format, ReclockPolicy, RetirePolicy
from docgen.snippets import code_blocks

VALID_YAML = """\
lake: ./lake
landing: /data/landing
window: 5m
start: 2026-01-01T00:00:00Z
end: "2026-01-01T01:00:00+00:00"
spark:
  master: local[1]
  conf:
    spark.sql.shuffle.partitions: 4
    spark.sql.adaptive.enabled: false
sources:
  - name: users
    topic: users.v1
    key: {id: long}
    value: {name: string, score: double}
    envelope: upsert
    reclock: arrival
    allow_offset_gaps: true
    start_offsets: {0: 10, "2": 5}
    retire: delete
    expectations:
      - type: expect_column_values_to_not_be_null
        kwargs: {column: id}
  - name: orders
    topic: orders
    format: json
    key: {id: bigint}
    value: {id: bigint, status: string}
    envelope: debezium-upsert
    reclock: event-time
"""

BASE: dict[str, Any] = {
    "lake": "lake",
    "landing": "landing",
    "window": "1m",
    "start": "2026-01-01T00:00:00Z",
    "sources": [
        {
            "name": "users",
            "topic": "users",
            "key": {"id": "bigint"},
            "value": {"name": "string"},
            "envelope": "upsert",
            "reclock": "event-time",
        },
        {
            "name": "orders",
            "topic": "orders",
            "key": {"id": "bigint"},
            "value": {"id": "bigint", "status": "string"},
            "envelope": "debezium",
            "reclock": "arrival",
        },
    ],
}


SOURCE_KEYS = (
    "name, topic, format, key, value, key_encoding, value_encoding, key_avro_schema, "
    "value_avro_schema, envelope, include, reclock, allow_offset_gaps, sink_stores, "
    "start_offsets, retire, stall_after, expectations, owners, history, retention"
)


def config_with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path changes, e.g. ``sources__1__envelope="x"``; None deletes."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, last = dotted.split("__")
        target: Any = data
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        if value is None:
            del target[int(last) if last.isdigit() else last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return data


def rejected(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, Path("/base"))
    return caught.value


def test_valid_config_loads_with_resolved_paths_and_types(tmp_path: Path) -> None:
    path = tmp_path / "reclock.yaml"
    path.write_text(VALID_YAML)
    config = load_config(path)

    assert config.lake == tmp_path / "lake"
    assert config.landing == Path("/data/landing")
    assert (config.window_ms, config.calendar.cron) == (300_000, "*/5 * * * *")
    assert config.start_ms == 1_767_225_600_000
    assert config.end_ms == 1_767_225_600_000 + 3_600_000
    assert config.spark.master == "local[1]"
    assert config.spark.conf == {
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "false",
    }
    users, orders = config.sources
    assert users.topic == "users.v1" and users.format == "json"
    assert users.key == {"id": "bigint"}
    assert users.start_offsets == OffsetFrontier({0: 10, 2: 5})
    assert users.allow_offset_gaps is True and users.retire == "delete"
    assert users.expectations[0].type == "expect_column_values_to_not_be_null"
    assert users.expectations[0].kwargs == {"column": "id"}
    assert users.output_schema == StructType(
        [
            StructField("id", LongType()),
            StructField("name", StringType()),
            StructField("score", DoubleType()),
        ]
    )
    assert users.key_schema == StructType([StructField("id", LongType())])
    # Debezium output is the after-image, which already holds the key.
    assert orders.output_schema == orders.value_schema
    assert [f.name for f in orders.output_schema] == ["id", "status"]
    assert (orders.allow_offset_gaps, orders.retire, orders.start_offsets) == (
        False,
        "archive",
        OffsetFrontier(),
    )
    assert config.source("orders") is orders
    assert config.end_ms is not None


@pytest.mark.parametrize(
    "spark",
    [
        {"remote": "sc://127.0.0.1:15002"},
        {"master": "sc://127.0.0.1:15002"},
        {"conf": {"spark.remote": "sc://127.0.0.1:15002", "spark.sql.shuffle.partitions": 3}},
    ],
    ids=["remote", "sc master", "conf"],
)
def test_a_spark_connect_address_is_carried_in_conf_however_it_is_named(spark: dict) -> None:
    config = parse_config(config_with(spark=spark), Path("/base"))
    assert config.spark.remote == "sc://127.0.0.1:15002"
    assert config.spark.master is None
    assert config.spark.conf["spark.remote"] == "sc://127.0.0.1:15002"


@pytest.mark.parametrize(
    ("spark", "problem"),
    [
        ({"master": "local[2]", "remote": "sc://h:1"}, "drop one of them"),
        ({"remote": "http://h:1"}, "must be an sc://host:port address"),
        ({"remote": "sc://h:1", "conf": {"spark.remote": "sc://h:2"}}, "differ"),
    ],
)
def test_a_spark_connect_address_is_refused_beside_a_master_or_malformed(
    spark: dict, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_config(config_with(spark=spark), Path("/base"))


def test_defaults_and_open_end() -> None:
    config = parse_config(BASE, Path("/base"))
    assert config.end_ms is None
    assert config.lake == Path("/base/lake")
    assert config.spark.master is None and config.spark.conf == {}
    assert config.sources[0].format == "json"


@pytest.mark.parametrize(
    ("window", "window_ms", "cron"),
    [
        ("1m", 60_000, "* * * * *"),
        ("120s", 120_000, "*/2 * * * *"),
        ("15m", 900_000, "*/15 * * * *"),
        ("60m", 3_600_000, "0 * * * *"),
        ("1h", 3_600_000, "0 * * * *"),
        ("6h", 21_600_000, "0 */6 * * *"),
        ("1d", 86_400_000, "0 0 * * *"),
    ],
)
def test_window_durations_and_their_cron(window: str, window_ms: int, cron: str) -> None:
    config = parse_config(config_with(window=window), Path("/base"))
    assert (config.window_ms, config.calendar.cron) == (window_ms, cron)


@pytest.mark.parametrize(
    ("window", "words"),
    [
        ("30s", "whole number of minutes"),
        ("7m", "tile the day"),
        ("40m", "no cron schedule"),
        ("90m", "no cron schedule"),
        ("2d", "tile the day"),
        ("5 minutes", "duration"),
        ("0m", "tile the day"),
    ],
)
def test_windows_that_cannot_be_scheduled_are_rejected(window: str, words: str) -> None:
    error = rejected(config_with(window=window))
    assert error.field == "window"
    assert words in str(error) and str(error).startswith("window:")


def test_start_must_be_an_aligned_utc_instant() -> None:
    assert rejected(config_with(start="yesterday")).field == "start"
    error = rejected(config_with(start="2026-01-01T00:00:00"))
    assert error.field == "start" and "UTC offset" in str(error)
    error = rejected(config_with(start="2026-01-01T00:00:30Z"))
    assert error.field == "start" and "window boundary" in str(error)
    assert parse_config(config_with(start="2026-01-01T01:00:00+01:00"), Path("/")).start_ms == (
        1_767_225_600_000
    )


def test_end_must_follow_start() -> None:
    error = rejected(config_with(end="2026-01-01T00:00:00Z"))
    assert error.field == "end" and "after start" in str(error)
    assert rejected(config_with(end="2026-01-01T00:00:10Z")).field == "end"


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"lake": None}, "lake", "is required"),
        ({"landing": 5}, "landing", "non-empty string"),
        ({"sources": []}, "sources", "non-empty list"),
        ({"colour": "red"}, "colour", "unknown key"),
        ({"sources__0__envelop": "upsert"}, "sources[0].envelop", "did you mean 'envelope'"),
        ({"sources__1__envelope": "upsrt"}, "sources[1].envelope", "must be one of none, upsert"),
        ({"sources__0__reclock": "wallclock"}, "sources[0].reclock", "arrival, event-time"),
        ({"sources__0__format": "avro"}, "sources[0].format", "json, cdcv2-json, cdcv2-avro"),
        ({"sources__0__retire": "keep"}, "sources[0].retire", "archive, delete"),
        ({"sources__0__name": "user-s"}, "sources[0].name", "identifier"),
        ({"sources__1__name": "users"}, "sources[1].name", "duplicate"),
        ({"sources__0__topic": "a topic"}, "sources[0].topic", "Kafka topic"),
        ({"sources__0__value__age": "integer"}, "sources[0].value.age", "type must be one of"),
        ({"sources__0__value__time": "bigint"}, "sources[0].value.time", "reserved"),
        ({"sources__0__value": {}}, "sources[0].value", "at least one column"),
        ({"sources__0__allow_offset_gaps": "yes"}, "sources[0].allow_offset_gaps", "true or"),
        ({"sources__0__start_offsets": {0: -1}}, "sources[0].start_offsets.0", "offset must"),
        ({"sources__0__start_offsets": {"p": 1}}, "sources[0].start_offsets.p", "partition must"),
        ({"sources__0__expectations": {"type": "x"}}, "sources[0].expectations", "list"),
        (
            {"sources__0__expectations": [{"type": "x"}]},
            "sources[0].expectations[0].type",
            "expect_",
        ),
        (
            {"sources__0__expectations": [{"type": "expect_x", "args": {}}]},
            "sources[0].expectations[0].args",
            "unknown key",
        ),
        ({"spark": {"master": "local", "cores": 2}}, "spark.cores", "unknown key"),
        ({"spark": {"conf": {"a": [1]}}}, "spark.conf.a", "scalar"),
        ({"spark": {"conf": {1: "x"}}}, "spark.conf.1", "must be a string (got int 1)"),
        ({"sources": "users"}, "sources", "must be a list (got str 'users')"),
        ({"sources__1": "orders"}, "sources[1]", "must be a mapping (got str 'orders')"),
        ({"sources__0__key": ["id"]}, "sources[0].key", "must be a mapping (got list ['id'])"),
        (
            {"sources__0__expectations": [{"type": "expect_x", "kwargs": {2: 1}}]},
            "sources[0].expectations[0].kwargs.2",
            "must be a string",
        ),
    ],
)
def test_each_invalid_field_is_named(changes: dict[str, Any], field: str, words: str) -> None:
    error = rejected(config_with(**changes))
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    assert words in str(error)


def test_keyed_envelopes_need_a_key_but_none_does_not() -> None:
    error = rejected(config_with(sources__0__key=None))
    assert error.field == "sources[0].key" and "upsert needs at least one key" in str(error)
    assert rejected(config_with(sources__1__key={})).field == "sources[1].key"
    keyless = parse_config(config_with(sources__0__key=None, sources__0__envelope="none"), Path())
    assert keyless.sources[0].key == {}


def test_upsert_key_and_value_columns_must_not_clash() -> None:
    error = rejected(config_with(sources__0__value={"id": "bigint", "name": "string"}))
    assert error.field == "sources[0].value.id" and "clashes with key column" in str(error)


def test_debezium_key_columns_must_be_after_image_columns() -> None:
    error = rejected(config_with(sources__1__key={"order_id": "bigint"}))
    assert error.field == "sources[1].key.order_id" and "after-image" in str(error)
    error = rejected(config_with(sources__1__key={"id": "string"}))
    assert error.field == "sources[1].key.id" and "differs" in str(error)


@pytest.mark.parametrize(("index", "envelope"), [(0, "none"), (1, "debezium")])
def test_history_is_refused_for_envelopes_without_versions(index: int, envelope: str) -> None:
    error = rejected(
        config_with(**{f"sources__{index}__envelope": envelope, f"sources__{index}__history": True})
    )
    assert [problem.field for problem in error.problems] == [f"sources[{index}].history"]
    assert "needs envelope upsert or debezium-upsert" in str(error) and envelope in str(error)


def test_history_columns_may_not_be_output_columns() -> None:
    error = rejected(
        config_with(
            sources__0__value={"name": "string", "valid_to": "bigint", "offset": "int"},
            sources__0__history=True,
        )
    )
    assert [problem.field for problem in error.problems] == [
        "sources[0].value.valid_to",
        "sources[0].value.offset",
    ]
    assert "is a column of the history table" in str(error)
    assert not parse_config(
        config_with(sources__0__value={"valid_to": "bigint"}), Path()
    ).sources[0].history


@pytest.mark.parametrize("envelope", ["none", "upsert"])
@pytest.mark.parametrize("format", ["cdcv2-json", "cdcv2-avro"])
def test_cdcv2_formats_need_the_materialize_envelope(format: str, envelope: str) -> None:
    # A CDCv2 topic read by another envelope would be misread as plain records.
    error = rejected(config_with(sources__0__format=format, sources__0__envelope=envelope))
    assert [problem.field for problem in error.problems] == ["sources[0].envelope"]
    assert f"format {format} needs envelope materialize" in str(error)


def test_materialize_reads_cdcv2_streams_without_key_and_with_cdcv2_types() -> None:
    stream = {"sources__0__format": "cdcv2-avro", "sources__0__envelope": "materialize"}
    config = parse_config(config_with(**stream, sources__0__key=None), Path("/base"))
    assert config.sources[0].format is Format.CDCV2_AVRO
    assert config.sources[0].output_schema.names == ["name"]
    error = rejected(config_with(sources__0__envelope="materialize", sources__0__key=None))
    assert error.field == "sources[0].envelope" and "format must be cdcv2-json" in str(error)
    error = rejected(config_with(**stream))
    assert error.field == "sources[0].key" and "has no key" in str(error)
    error = rejected(config_with(**stream, sources__0__key=None, sources__0__value__d="date"))
    assert error.field == "sources[0].value.d" and "cannot be carried by a CDCv2" in str(error)


def test_every_problem_is_reported_at_once() -> None:
    error = rejected(
        config_with(
            colour="red",
            end="2025-12-31T00:00:00Z",
            sources__0__envelop="upsert",
            sources__0__start_offsets={"p": 1, 3: -2},
            sources__1__envelope="upsrt",
            sources__1__name="users",
            sources__1__topic={"a": 1},
            spark={"mastr": "local"},
        )
    )
    assert sorted(error.problems) == sorted(
        [
            (
                "colour",
                "unknown key (expected: lake, landing, window, start, end, retention, launchable, "
                "spark, "
                "storage, catalog, readers, schema_folder, sources, transactions)",
            ),
            ("end", "must be after start (2026-01-01T00:00:00Z)"),
            ("spark.mastr", "unknown key; did you mean 'master'? (expected: master, remote, conf)"),
            (
                "sources[0].envelop",
                f"unknown key; did you mean 'envelope'? (expected: {SOURCE_KEYS})",
            ),
            (
                "sources[0].start_offsets.p",
                "partition must be a non-negative integer (got str 'p')",
            ),
            ("sources[0].start_offsets.3", "offset must be a non-negative integer (got int -2)"),
            (
                "sources[1].envelope",
                "must be one of none, upsert, debezium-upsert, debezium, materialize (got 'upsrt')",
            ),
            ("sources[1].name", "duplicate source name 'users'"),
            ("sources[1].topic", "must be a non-empty string (got dict {'a': 1})"),
        ]
    )
    assert str(error).splitlines() == [f"{field}: {problem}" for field, problem in error.problems]
    assert error.field == error.problems[0].field


def test_cross_field_rules_report_every_broken_column() -> None:
    error = rejected(
        config_with(
            sources__0__value={"id": "bigint", "name": "string"},
            sources__0__key={"id": "bigint", "name": "string"},
            sources__1__key={"order_id": "bigint", "id": "string"},
        )
    )
    assert [problem.field for problem in error.problems] == [
        "sources[0].value.id",
        "sources[0].value.name",
        "sources[1].key.order_id",
        "sources[1].key.id",
    ]


@pytest.mark.parametrize(
    ("changes", "field", "hint"),
    [
        ({"lakes": "x"}, "lakes", "lake"),
        ({"sources__1__reclok": "arrival"}, "sources[1].reclok", "reclock"),
        ({"sources__0__start_offset": {}}, "sources[0].start_offset", "start_offsets"),
        ({"spark": {"cnf": {}}}, "spark.cnf", "conf"),
        (
            {"sources__0__expectations": [{"type": "expect_x", "kwarg": {}}]},
            "sources[0].expectations[0].kwarg",
            "kwargs",
        ),
    ],
)
def test_near_miss_keys_get_a_did_you_mean_hint(
    changes: dict[str, Any], field: str, hint: str
) -> None:
    error = rejected(config_with(**changes))
    assert error.problems[0].field == field
    assert error.problems[0].problem.startswith(f"unknown key; did you mean {hint!r}?")


def test_far_off_keys_get_no_hint() -> None:
    error = rejected(config_with(sources__0__zzz=1))
    assert error.problems[0].problem.startswith("unknown key (expected: name, topic, format,")


def test_null_means_absent() -> None:
    # An empty YAML value (`end:`) is null: the key's default applies, or it is missing.
    data = config_with() | {"end": None, "spark": None, "window": None}
    data["sources"][0] |= {"retire": None, "key": None, "envelope": "none"}
    error = rejected(data)
    assert [(p.field, p.problem) for p in error.problems] == [("window", "is required")]
    config = parse_config(data | {"window": "1m"}, Path("/base"))
    assert (config.end_ms, config.spark) == (None, SparkSettings())
    assert (config.sources[0].retire, config.sources[0].key) == ("archive", {})


def test_vocabularies_are_the_engines_enums() -> None:
    users, orders = parse_config(BASE, Path("/base")).sources
    assert users.envelope is Envelope.UPSERT and users.envelope == "upsert"
    assert orders.reclock is ReclockPolicy.ARRIVAL and users.retire is RetirePolicy.ARCHIVE
    assert users.format is Format.JSON


def test_config_is_frozen() -> None:
    config = parse_config(BASE, Path("/base"))
    with pytest.raises(ValidationError):
        config.window = "5m"  # type: ignore[misc]
    assert config.model_copy(update={"lake": Path("/elsewhere")}).lake == Path("/elsewhere")


def test_load_config_names_the_file_on_errors(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(missing)
    broken = tmp_path / "broken.yaml"
    broken.write_text("lake: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(scalar)
    typo = tmp_path / "typo.yaml"
    typo.write_text(VALID_YAML.replace("envelope: upsert", "envelope: upsrt"))
    with pytest.raises(ConfigError) as caught:
        load_config(typo)
    assert str(caught.value) == (
        f"{typo}: sources[0].envelope: must be one of none, upsert, debezium-upsert, debezium, "
        "materialize (got 'upsrt')"
    )
    typos = tmp_path / "typos.yaml"
    typos.write_text(typo.read_text().replace("window: 5m", "windw: 5m"))
    with pytest.raises(ConfigError) as caught:
        load_config(typos)
    assert sorted(str(caught.value).splitlines()) == [
        f"{typos}: sources[0].envelope: must be one of none, upsert, debezium-upsert, debezium, "
        "materialize (got 'upsrt')",
        f"{typos}: window: is required",
        f"{typos}: windw: unknown key; did you mean 'window'? "
        "(expected: lake, landing, window, start, end, retention, launchable, spark, storage, "
        "catalog, readers, "
        "schema_folder, "
        "sources, transactions)",
    ]


ROOT = Path(__file__).resolve().parents[1]


def test_shipped_schema_is_current() -> None:
    shipped = (ROOT / "pipelines" / "reclock.schema.json").read_text(encoding="utf-8")
    assert shipped == config_schema_json(), (
        "regenerate it: reclock config schema > pipelines/reclock.schema.json"
    )


def test_schema_documents_every_field() -> None:
    fields = schema_fields(config_schema())
    undocumented = [path for path, node in fields if not node.get("description")]
    assert undocumented == []


CONFIG_PAGE = ROOT / "docs" / "reference" / "config.md"


def documented_example() -> dict[str, Any]:
    """The config reference's example naming every option: its first whole config."""
    block = next(b for b in code_blocks(CONFIG_PAGE) if b.title == "reclock.yaml")
    return yaml.safe_load(block.text)


def test_documented_example_is_a_valid_config_naming_every_field(tmp_path: Path) -> None:
    example = documented_example()
    # The Avro schemas the example names, as a user would have them.
    (tmp_path / "schemas" / "payments-value").mkdir(parents=True)
    (tmp_path / "schemas" / "payments-key.avsc").write_text('"string"')
    payment = {"type": "record", "name": "Payment", "fields": [
        {"name": "amount", "type": "double"}, {"name": "memo", "type": ["null", "string"]}]}
    (tmp_path / "schemas" / "payments-value.avsc").write_text(json.dumps(payment))
    (tmp_path / "schemas" / "payments-value" / "1.json").write_text(
        json.dumps({"id": 8, "schema": json.dumps(payment)})
    )
    (tmp_path / "schemas" / "payments-key").mkdir()
    (tmp_path / "schemas" / "payments-key" / "1.json").write_text(
        json.dumps({"id": 7, "schema": '"string"'})
    )

    config = parse_config(example, tmp_path)

    assert config.lake == tmp_path / "lake"
    assert {path for path, _ in schema_fields(config_schema())} == document_fields(
        example, config_schema()
    )


def test_editors_judge_by_the_schema_as_the_model_does() -> None:
    validator = Draft202012Validator(config_schema())
    # YAML reads unquoted timestamps as datetimes; an editor sees the text.
    example = json.loads(json.dumps(documented_example(), default=str))
    assert list(validator.iter_errors(example)) == []
    assert list(validator.iter_errors(BASE)) == []
    for changes in [
        {"colour": "red"},
        {"window": "5 minutes"},
        {"sources": []},
        {"sources__0__envelope": "upsrt"},
        {"sources__0__format": "cdcv2-json"},
        {"sources__0__envelope": "materialize", "sources__0__key": None},
        {"sources__0__value__time": "bigint"},
        {"sources__0__value__age": "integer"},
        {"sources__0__value": {}},
        {"sources__0__start_offsets": {"p": 1}},
        {"spark": {"conf": {"a": [1]}}},
    ]:
        data = config_with(**changes)
        rejected(data)
        assert list(validator.iter_errors(data)), changes


def schema_fields(node: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every field the schema accepts, as paths such as ``sources[].name``, with its node."""
    node = resolved(node)
    if "items" in node:
        return schema_fields(node["items"], f"{prefix}[]")
    fields = []
    for key, child in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        fields += [(path, child), *schema_fields(child, path)]
    return fields


def document_fields(data: Any, node: dict[str, Any], prefix: str = "") -> set[str]:
    """The field paths a document uses, walking it along the schema; the keys of mappings
    whose keys are data (columns, settings) are not fields."""
    node = resolved(node)
    if isinstance(data, list):
        items = node["items"]
        return {path for item in data for path in document_fields(item, items, f"{prefix}[]")}
    if not isinstance(data, dict) or "properties" not in node:
        return set()
    paths = set()
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        paths |= {path, *document_fields(value, node["properties"].get(key, {}), path)}
    return paths


def resolved(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return resolved(config_schema()["$defs"][node["$ref"].split("/")[-1]])
    branches = [branch for branch in node.get("anyOf", []) if branch.get("type") != "null"]
    return resolved(branches[0]) if branches else node


def test_reader_settings_default_and_refuse_empty_or_malformed_durations() -> None:
    config = parse_config(config_with(), Path("/base"))
    assert (config.readers.lease_ms, config.readers.warn_after_ms) == (3_600_000, 86_400_000)
    tuned = parse_config(config_with(readers={"lease": "90s", "warn_after": "2h"}), Path("/b"))
    assert (tuned.readers.lease_ms, tuned.readers.warn_after_ms) == (90_000, 7_200_000)
    assert "readers.warn_after: must be longer than zero" in str(
        rejected(config_with(readers={"warn_after": "0m"}))
    )
    assert "readers.lease: must be a duration" in str(rejected(config_with(readers={"lease": 5})))
    assert "readers.lifetime: unknown key" in str(rejected(config_with(readers={"lifetime": "1h"})))


def test_the_launchable_span_keeps_the_partitions_within_dagsters_guidance() -> None:
    """At most 100,000 windows per asset at any age: an open-ended config lists six hours
    of windows unless told otherwise, whatever its retention; a span, or a finite range
    without one, beyond the guidance is refused at load, naming the longest it may be."""
    day, hour = 86_400_000, 3_600_000
    open_ended = parse_config(config_with(), Path("/b"))
    assert (open_ended.retention_ms, open_ended.launchable_ms) == (30 * day, 6 * hour)
    finite = config_with(end="2026-01-02T00:00:00Z")
    assert parse_config(finite, Path("/b")).retention_ms is None  # every window from start
    assert parse_config(finite, Path("/b")).launchable_ms is None
    # The tables may be kept far longer than Dagster lists windows.
    assert parse_config(config_with(retention="400d"), Path("/b")).retention_ms == 400 * day
    assert parse_config(config_with(launchable="69d"), Path("/b")).launchable_ms == 69 * day
    too_long = rejected(config_with(launchable="70d"))
    assert too_long.field == "launchable"
    assert "100,860 windows of 1m" in str(too_long) and "at most 69d" in str(too_long)
    assert parse_config(config_with(window="5m", launchable="347d"), Path("/b"))
    assert "at most 347d for 5m" in str(rejected(config_with(window="5m", launchable="348d")))
    daily = parse_config(config_with(window="1d", start="2026-01-01T00:00:00Z"), Path("/b"))
    assert launch_step_ms(daily.window_ms) == day and launch_step_ms(open_ended.window_ms) == hour
    # A finite config holds no more than its own windows, whatever its retention or span.
    short = config_with(end="2026-01-01T01:00:00Z", retention="400d", launchable="400d")
    assert parse_config(short, Path("/b")).retention_ms == 400 * day
    year = rejected(config_with(end="2027-01-01T00:00:00Z"))
    assert year.field == "end" and "525,600 windows of 1m" in str(year)
    assert "set a launchable span (at most 69d)" in str(year)
    assert parse_config(config_with(end="2027-01-01T00:00:00Z", launchable="30d"), Path("/b"))
    assert parse_config(config_with(end="2027-01-01T00:00:00Z", retention="30d"), Path("/b"))
    kept = rejected(config_with(end="2027-01-01T00:00:00Z", retention="69d"))
    assert kept.field == "retention" and "at most 68d" in str(kept)
    assert "retention: must be longer than zero" in str(rejected(config_with(retention="0d")))
    assert "retention: must be a duration" in str(rejected(config_with(retention="a month")))
    assert "launchable: must be longer than zero" in str(rejected(config_with(launchable="0h")))


def test_the_partitions_span_the_launchable_hours_never_before_a_retention() -> None:
    """The partitions begin at the hour at or before now - launchable, so about the same
    number of windows is listed at any age; never before the earliest source horizon
    (where the tables still read back exactly), which a source's retention places."""
    day, hour = 86_400_000, 3_600_000
    now = 1_767_225_600_000 + 100 * day + 5 * hour + 17 * 60_000  # day 100, 05:17
    midnight = now // day * day
    default = parse_config(config_with(), Path("/b"))
    assert default.calendar.first_window_start(now) == midnight - hour  # 23:17 the day before
    assert default.calendar.first_window_start(now + 42 * 60_000) == midnight - hour
    assert default.calendar.first_window_start(now + 43 * 60_000) == midnight
    assert default.calendar.retention_start(now) == midnight - 30 * day
    both = parse_config(config_with(retention="10d", sources__0__retention="2d"), Path("/b"))
    assert both.source_retention_ms("users") == 2 * day
    assert both.source_retention_ms("orders") == 10 * day  # the config's
    assert both.calendar.source_horizon("users", now) == midnight - 2 * day
    assert both.calendar.source_horizon("orders", now) == midnight - 10 * day
    assert both.calendar.retention_start(now) == midnight - 10 * day
    assert both.calendar.first_window_start(now) == midnight - hour  # the span's
    spanned = parse_config(config_with(launchable="45d", sources__1__retention="40d"), Path("/b"))
    assert spanned.calendar.source_horizon("users", now) == midnight - 30 * day  # the default
    assert spanned.calendar.first_window_start(now) == midnight - 40 * day  # the longest retention
    # A finite config: a source without a retention keeps every window from start.
    finite = parse_config(config_with(end="2026-02-01T00:00:00Z", sources__0__retention="1d"),
                          Path("/b"))  # fmt: skip
    jan_20 = 1_767_225_600_000 + 19 * day
    assert finite.calendar.first_window_start(jan_20 + hour) == 1_767_225_600_000
    assert finite.calendar.source_horizon("users", jan_20 + hour) == jan_20 - day
    spanned = parse_config(config_with(end="2026-02-01T00:00:00Z", launchable="2h"), Path("/b"))
    assert spanned.calendar.first_window_start(jan_20 + hour + 60_000) == jan_20 - hour
    last = 1_769_904_000_000 - 60_000
    assert spanned.calendar.first_window_start(jan_20 + 30 * day) == last
    assert "retention: must be longer than zero" in str(
        rejected(config_with(sources__0__retention="0d"))
    )

USER_AVRO = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": ["null", "string"]}, {"name": "n", "type": "int"}],
}


def schema_folder(root: Path) -> Path:
    """A schema folder as the registry serves subjects: users-value versions 1 and 2."""
    for version, fields in ((1, USER_AVRO["fields"][:1]), (2, USER_AVRO["fields"])):
        path = root / "schemas" / "users-value" / f"{version}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {"id": 40 + version, "schema": json.dumps({**USER_AVRO, "fields": fields})}
        path.write_text(json.dumps(entry))
    return root / "schemas"


def test_avro_schemas_load_from_a_file_or_a_subject_and_must_fit_the_columns(
    tmp_path: Path,
) -> None:
    folder = schema_folder(tmp_path)
    (tmp_path / "key.avsc").write_text('"long"')
    avro = {
        "schema_folder": str(folder),
        "sources__0__key_encoding": "avro",
        "sources__0__key_avro_schema": {"file": "key.avsc", "id": 3},
        "sources__0__value_encoding": "avro",
        "sources__0__value_avro_schema": {"subject": "users-value"},
    }
    config = parse_config(config_with(**avro), tmp_path)
    users = config.sources[0]
    assert users.avro_schema("key", config.schema_folder).schema_id == 3
    latest = users.avro_schema("value", config.schema_folder)
    assert (latest.schema_id, latest.origin) == (42, "users-value version 2")
    assert parse_config(
        config_with(**{**avro, "sources__0__value_avro_schema": {"subject": "users-value",
                                                                   "version": 1}}),
        tmp_path,
    ).sources[0].avro_schema("value", folder).schema_id == 41
    # Declared columns the schema cannot fill are named, at load.
    error = rejected_at(tmp_path, config_with(**avro, sources__0__value={"name": "bigint"}))
    assert error.field == "sources[0].value.name" and "cannot hold" in str(error)
    error = rejected_at(tmp_path, config_with(**avro, sources__0__value={"email": "string"}))
    assert error.field == "sources[0].value.email" and "is not a field of" in str(error)
    error = rejected_at(
        tmp_path, config_with(**{**avro, "sources__0__value_avro_schema": {"subject": "nobody"}})
    )
    assert error.field == "sources[0].value_avro_schema" and "no version of subject" in str(error)


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"sources__0__key_encoding": "avro"}, "sources[0].key_avro_schema", "needs it"),
        (
            {"sources__0__value_avro_schema": {"file": "v.avsc", "id": 1}},
            "sources[0].value_avro_schema",
            "is only for value_encoding avro",
        ),
        (
            {"sources__0__value_encoding": "avro",
             "sources__0__value_avro_schema": {"file": "v.avsc"}},
            "sources[0].value_avro_schema.id",
            "needs the schema id",
        ),
        (
            {"sources__0__value_encoding": "avro",
             "sources__0__value_avro_schema": {"subject": "users-value"}},
            "sources[0].value_avro_schema",
            "needs schema_folder",
        ),
        ({"sources__0__key_encoding": "text"}, "sources[0].key_encoding", "of type string"),
        ({"sources__0__value_encoding": "bytes"}, "sources[0].value_encoding", "of type bytes"),
        ({"sources__1__value_encoding": "text"}, "sources[1].value_encoding", "json or avro"),
        ({"sources__0__key_encoding": "protobuf"}, "sources[0].key_encoding", "json, text, bytes"),
        (
            {"sources__0__envelope": "none", "sources__0__key": None,
             "sources__0__key_encoding": "text"},
            "sources[0].key_encoding",
            "no key columns",
        ),
        (
            {"sources__0__format": "cdcv2-json", "sources__0__envelope": "materialize",
             "sources__0__key": None, "sources__0__value_encoding": "bytes",
             "sources__0__value": {"b": "bytes"}},
            "sources[0].value_encoding",
            "decodes its own values",
        ),
    ],
)
def test_encoding_options_are_judged_at_load(
    changes: dict[str, Any], field: str, words: str
) -> None:
    error = rejected(config_with(**changes))
    assert field in [problem.field for problem in error.problems], str(error)
    assert words in str(error)


def test_text_and_bytes_fill_one_column() -> None:
    config = parse_config(
        config_with(
            sources__0__key={"k": "string"},
            sources__0__key_encoding="text",
            sources__0__value={"blob": "bytes"},
            sources__0__value_encoding="bytes",
        ),
        Path("/base"),
    )
    assert config.sources[0].output_schema.simpleString() == "struct<k:string,blob:binary>"


def rejected_at(base: Path, data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, base)
    return caught.value


def test_include_adds_metadata_columns_and_refuses_what_cannot_work() -> None:
    config = parse_config(config_with(sources__0__include=["offset", "timestamp"]), Path("/b"))
    assert config.sources[0].output_schema.names == ["id", "name", "offset", "timestamp"]
    assert "headers" not in config.sources[0].reclocked_schema.names
    config = parse_config(config_with(sources__0__include=["headers"]), Path("/b"))
    assert config.sources[0].output_schema.simpleString() == (
        "struct<id:bigint,name:string,headers:array<struct<key:string,value:binary>>>"
    )
    assert config.sources[0].reclocked_schema.names[-1] == "headers"
    cases = [
        ({"sources__1__envelope": "debezium-upsert", "sources__1__include": ["headers"]},
         "sources[1].include[0]", "envelope debezium-upsert cannot include headers"),
        ({"sources__0__include": ["offset", "offset"]}, "sources[0].include[1]", "twice"),
        ({"sources__0__include": ["key", "offset"], "sources__0__history": True},
         "sources[0].include[1]", "offset is a column of the history table"),
        ({"sources__0__include": ["ts"]}, "sources[0].include[0]", "partition, offset, timestamp"),
        ({"sources__1__include": ["partition"]}, "sources[1].include[0]", "cannot include"),
        (
            {"sources__0__include": ["partition"], "sources__0__value": {"partition": "int"}},
            "sources[0].include[0]",
            "already a key or value column",
        ),
    ]
    for changes, field, words in cases:
        error = rejected(config_with(**changes))
        assert field in [p.field for p in error.problems] and words in str(error), changes


GROUP = {"name": "shop", "topic": "shop.transaction", "sources": {"orders": "inventory.orders"}}


def test_transaction_groups_load_with_their_members() -> None:
    config = parse_config(config_with(transactions=[GROUP]), Path("/base"))
    (group,) = config.transactions
    assert (group.name, group.topic, dict(group.sources)) == (
        "shop", "shop.transaction", {"orders": "inventory.orders"}
    )
    assert group.timeout_ms == 10 * 60_000  # the default
    assert config.transaction_group("orders") is group
    assert config.transaction_group("users") is None
    assert parse_config(BASE, Path("/base")).transactions == ()


@pytest.mark.parametrize(
    ("group", "field", "words"),
    [
        ({"sources": {"users": "inventory.users"}}, "transactions[0].sources.users",
         "envelope debezium or debezium-upsert (got upsert)"),
        ({"sources": {"nobody": "x"}}, "transactions[0].sources.nobody",
         "no source named 'nobody' (configured: users, orders)"),
        ({"sources": {}}, "transactions[0].sources", "at least one member"),
        ({"sources": {"orders": ""}}, "transactions[0].sources.orders", "non-empty string"),
        ({"timeout": "soon"}, "transactions[0].timeout", "duration"),
        ({"timeout": "0m"}, "transactions[0].timeout", "longer than zero"),
        ({"topic": "a topic"}, "transactions[0].topic", "Kafka topic"),
        ({"timout": "5m"}, "transactions[0].timout", "did you mean 'timeout'"),
        ({"name": "shop-1"}, "transactions[0].name", "identifier"),
    ],
)
def test_transaction_groups_are_judged_at_load(group: dict, field: str, words: str) -> None:
    error = rejected(config_with(transactions=[{**GROUP, **group}]))
    assert error.field == field and words in str(error), str(error)


def test_a_source_joins_one_transaction_group_with_json_values(tmp_path: Path) -> None:
    twice = rejected(config_with(transactions=[GROUP, {**GROUP, "name": "again"}]))
    assert str(twice) == (
        "transactions[1].sources.orders: already a member of group 'shop'"
    )
    same_name = rejected(
        config_with(transactions=[GROUP, {**GROUP, "sources": {"x": "y"}}])
    )
    assert "transactions[1].name: duplicate group name 'shop'" in str(same_name)
    avro = config_with(
        transactions=[GROUP],
        sources__1__value_encoding="avro",
        sources__1__value_avro_schema={"file": "v.avsc", "id": 1},
    )
    record = {"type": "record", "name": "Order", "fields": [
        {"name": "after", "type": ["null", {"type": "record", "name": "Row", "fields": [
            {"name": "id", "type": "long"}, {"name": "status", "type": "string"}]}]}]}
    (tmp_path / "v.avsc").write_text(json.dumps(record))  # the schema exists and fits
    with pytest.raises(ConfigError) as caught:
        parse_config(avro, tmp_path)
    assert str(caught.value) == (
        "transactions[0].sources.orders: must have json values: the transaction id is read "
        "from them (got avro)"
    )


def test_a_catalog_is_off_by_default_and_hive_settings_join_the_session() -> None:
    assert parse_config(config_with(), Path("/base")).catalog.kind == "none"
    embedded = parse_config(config_with(catalog={"kind": "hive"}), Path("/base"))
    assert embedded.catalog.folder == Path("/base/metastore")  # beside the config file
    assert embedded.spark.conf == {
        "spark.sql.catalogImplementation": "hive",
        "spark.sql.warehouse.dir": "/base/metastore/warehouse",
        "spark.hadoop.javax.jdo.option.ConnectionURL":
            "jdbc:derby:;databaseName=/base/metastore/metastore_db;create=true",
    }  # fmt: skip
    external = parse_config(
        config_with(catalog={"kind": "hive", "metastore_uri": "thrift://hms:9083",
                             "table_names": "raw_{source}_{table}"}), Path("/base")
    )  # fmt: skip
    assert external.spark.conf == {"spark.sql.catalogImplementation": "hive",
                                   "spark.hadoop.hive.metastore.uris": "thrift://hms:9083"}
    assert external.catalog.table_name("Users", "state") == "raw_users_state"


def test_catalog_settings_of_another_kind_unity_and_clashing_names_are_refused() -> None:
    assert [str(p) for p in rejected(config_with(catalog={"kind": "unity"})).problems] == [
        "catalog.kind: unity is not supported: reclock registers tables only in catalogs it "
        "is tested against, and no Unity Catalog server (io.unitycatalog:unitycatalog-server) "
        "is available to test against; use hive (a Hive metastore, which Unity Catalog can "
        "federate) or glue"
    ]
    error = rejected(config_with(catalog={"kind": "glue", "metastore_uri": "thrift://h:1",
                                          "folder": "m"}))  # fmt: skip
    assert sorted(map(str, error.problems)) == [
        "catalog.folder: is not a setting of kind glue",
        "catalog.metastore_uri: is not a setting of kind glue",
    ]
    error = rejected(config_with(catalog={"kind": "hive", "table_names": "{source}"}))
    assert [str(p) for p in error.problems] == [
        "catalog.table_names: must hold {table} once (got '{source}')"
    ]
    error = rejected(config_with(catalog={"kind": "hive"}, sources__1__name="USERS",
                                 spark={"conf": {"spark.sql.catalogImplementation": "in-memory"}}))
    assert sorted(map(str, error.problems)) == [
        "sources[1].name: names the same catalog tables as source 'users' (users_state, ...): "
        "metastores ignore case",
        "spark.conf.spark.sql.catalogImplementation: must be hive for catalog kind hive (or "
        "left out)",
    ]
