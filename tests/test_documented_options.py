"""Every option the config reference's example (docs/reference/config.md) documents is read
by the engine: loading the example with that one option changed changes what the engine
does with it.

Each probe asks the engine (not the config model) what it will do: which windows and
cron it runs, which Spark settings the session gets, which columns the envelope writes,
how a record decodes, which offsets a source starts at, which expectations run. A new
documented option without a probe fails ``test_every_documented_option_has_a_probe``, so
an option cannot be documented and silently ignored.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyspark.sql import SparkSession

from cdc_core.catalog.glue import GlueMetastore
from cdc_core.checks import validate
from cdc_core.config import Config, parse_config, use_config
from cdc_core.envelopes import EnvelopeBatch, apply_envelope
from cdc_core.envelopes.encodings import PartEncoding, as_json_text
from cdc_core.ingest import list_dump_files
from cdc_core.reclock import HeldPartition, overdue
from cdc_core.reclock.remap import configured_starts
from cdc_core.source.layout import published_tables, source_registry, transaction_binder
from cdc_core.source.registration import Registration
from cdc_core.spark import named_remote, session_conf
from cdc_core.storage import Location, delta_options, spark_conf
from tests.envelopes.test_envelope_support import dataframe
from tests.test_config import config_schema, document_fields, documented_example

AMOUNT = {"name": "amount", "type": "double"}
MEMO = {"name": "memo", "type": ["null", "string"]}
PAYMENT = {"type": "record", "name": "Payment", "fields": [AMOUNT, MEMO]}
OTHER = {"type": "record", "name": "Payment", "fields": [MEMO, AMOUNT]}  # the same, reordered


def schemas(root: Path) -> None:
    """The schema files the example names, and the ones its variants name instead."""
    subjects = {
        "schemas": {
            "payments-key": {1: (7, '"string"'), 2: (17, '"string"')},
            "payments-value": {1: (8, json.dumps(PAYMENT)), 2: (18, json.dumps(OTHER))},
            "other-key": {1: (7, '["null", "string"]')},
            "other-value": {1: (8, json.dumps(OTHER))},
        },
        "schemas2": {
            "payments-key": {1: (7, '["null", "string"]')},
            "payments-value": {1: (8, json.dumps(PAYMENT))},
        },
    }
    for folder, entries in subjects.items():
        for subject, versions in entries.items():
            (root / folder / subject).mkdir(parents=True, exist_ok=True)
            for version, (schema_id, text) in versions.items():
                entry = {"id": schema_id, "schema": text}
                (root / folder / subject / f"{version}.json").write_text(json.dumps(entry))
    files = {"payments-key.avsc": '"string"', "other-key.avsc": '["null", "string"]',
             "payments-value.avsc": json.dumps(PAYMENT), "other.avsc": json.dumps(OTHER)}
    for name, text in files.items():
        (root / "schemas" / name).write_text(text)


def wire(schema: object, value: object, schema_id: int) -> str:
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return base64.b64encode(out.getvalue()).decode()


# Records of each documented source, as its dump holds them: (key text, payload text).
# A source that includes headers reads HEADERS as each record's headers text.
HEADERS = '["trace", "t1", "trace", "t2"]'
PAID = (wire("string", "k1", 7), wire(PAYMENT, {"amount": 1.5, "memo": "m"}, 8))
RECORDS = {
    "users": [
        ('{"id": 1}', '{"name": "n", "email": "e", "tier": "free"}'),
        ('{"id": 1}', '{"name": "n", "email": "e", "tier": "pro"}'),
    ],
    "payments": [PAID],
    "refunds": [PAID],
}


def decoded(spark: SparkSession, config: Config, name: str) -> tuple:
    """What the engine makes of the source's record: its changes and error reasons."""
    source = config.source(name)
    headers = [HEADERS] if source.keeps_headers else []
    rows = [(0, offset, 1_767_225_600_000, key, payload, *headers)
            for offset, (key, payload) in enumerate(RECORDS[name])]  # fmt: skip
    records = dataframe(spark, rows, source.reclocked_schema)
    parts = {
        part: PartEncoding(
            source.key_encoding if part == "key" else source.value_encoding,
            tuple(source.key if part == "key" else source.value),
            source.avro_schema(part, config.schema_folder),
        )
        for part in ("key", "value")
    }
    batch = EnvelopeBatch(
        as_json_text(records, parts["key"], parts["value"]), time=10, topic=source.topic,
        key_schema=source.key_schema, value_schema=source.value_schema,
        include=source.include, format=source.format,
    )  # fmt: skip
    result = apply_envelope(source.envelope, batch)
    changes = sorted(tuple(r) for r in result.changes.collect())
    return changes, sorted(r["reason"] for r in result.errors.collect())


# When the retention probe looks: two days after the example's windows.
JAN_3 = 1_767_398_400_000  # 2026-01-03T00:00:00Z


def users(config: Config) -> Any:
    return config.source("users")


def _horizons(config: Config) -> list[int]:
    """Where each source's windows stay re-materializable, and the partitions begin."""
    sources = [config.calendar.source_horizon(source.name, JAN_3) for source in config.sources]
    return [*sources, config.calendar.first_window_start(JAN_3)]


# option path -> (change of the example, probe of the engine's behaviour)
PROBES: dict[str, tuple[dict[str, Any], Callable[..., Any]]] = {
    "lake": ({"lake": "elsewhere"}, lambda c, s: c.lake),
    "landing": ({"landing": "other"}, lambda c, s: c.landing / users(c).topic),
    "window": (
        {"window": "5m", "end": "2026-01-01T00:10:00Z"},
        lambda c, s: (c.calendar.cron, c.window_ms),
    ),
    "start": ({"start": "2026-01-01T00:05:00Z"}, lambda c, s: c.start_ms),
    "end": ({"end": "2026-01-01T00:20:00Z"}, lambda c, s: c.end_ms),
    "retention": ({"retention": "1d"}, lambda c, s: _horizons(c)),
    "launchable": ({"launchable": "3d"}, lambda c, s: _horizons(c)),
    "spark": ({"spark": {"master": "local[1]"}},
              lambda c, s: session_conf(c.spark.master, c.spark.conf)),
    "spark.master": ({"spark.master": "local[1]"}, lambda c, s: session_conf(c.spark.master)),
    "spark.remote": ({"spark.master": None, "spark.remote": "sc://127.0.0.1:15002"},
                     lambda c, s: named_remote(c.spark.master, c.spark.conf)),
    "spark.conf": ({"spark.conf": {"spark.driver.memory": "1g"}},
                   lambda c, s: session_conf(None, c.spark.conf)),
    "storage": ({"storage": {"region": "eu-west-1"}}, lambda c, s: _reach()),
    "storage.endpoint": ({"storage.endpoint": "http://127.0.0.1:9000"}, lambda c, s: _reach()),
    "storage.region": ({"storage.region": "eu-west-1"}, lambda c, s: _reach()),
    "storage.access_key_id": ({"storage.access_key_id": "AKIDOTHER"}, lambda c, s: _reach()),
    "storage.secret_access_key": ({"storage.secret_access_key": "other"},
                                  lambda c, s: _reach()),
    "storage.retries": ({"storage.retries": {"attempts": 3}}, lambda c, s: _reach()),
    "storage.retries.attempts": ({"storage.retries.attempts": 3}, lambda c, s: _reach()),
    "storage.retries.base_backoff": ({"storage.retries.base_backoff": "200ms"},
                                     lambda c, s: _reach()),
    "storage.retries.max_backoff": ({"storage.retries.max_backoff": "10s"},
                                    lambda c, s: _reach()),
    "storage.retries.request_timeout": ({"storage.retries.request_timeout": "10s"},
                                        lambda c, s: _reach()),
    "storage.retries.deadline": ({"storage.retries.deadline": "5m"}, lambda c, s: _reach()),
    "catalog": ({"catalog": {"kind": "glue"}}, lambda c, s: _registered(s, c)),
    "catalog.kind": ({"catalog.kind": "none", "catalog.folder": None},
                     lambda c, s: _registered(s, c)),
    "catalog.database": ({"catalog.database": "shop_eu"}, lambda c, s: _registered(s, c)),
    "catalog.table_names": ({"catalog.table_names": "{table}_of_{source}"},
                            lambda c, s: _registered(s, c)),
    "catalog.metastore_uri": ({"catalog.metastore_uri": "thrift://127.0.0.1:9083",
                               "catalog.folder": None},
                              lambda c, s: session_conf(None, c.spark.conf)),
    "catalog.folder": ({"catalog.folder": "elsewhere"},
                       lambda c, s: session_conf(None, c.spark.conf)),
    "catalog.region": ({"catalog.kind": "glue", "catalog.folder": None,
                        "catalog.region": "eu-west-1"}, lambda c, s: _glue_client(s, c)),
    "catalog.endpoint": ({"catalog.kind": "glue", "catalog.folder": None,
                          "catalog.endpoint": "http://127.0.0.1:9999"},
                         lambda c, s: _glue_client(s, c)),
    "readers": (
        {"readers": {"lease": "30m", "warn_after": "3h"}},
        lambda c, s: (c.readers.lease_ms, c.readers.warn_after_ms),
    ),
    "readers.lease": ({"readers.lease": "2h"}, lambda c, s: c.readers.lease_ms),
    "readers.warn_after": ({"readers.warn_after": "2h"}, lambda c, s: c.readers.warn_after_ms),
    "schema_folder": ({"schema_folder": "schemas2"}, lambda c, s: decoded(s, c, "payments")),
    "sources": ({"sources": "users only", "transactions": None},
                lambda c, s: [x.name for x in c.sources]),
    "sources[].name": ({"users.name": "people"}, lambda c, s: c.sources[0].output_schema and
                       c.sources[0].name),
    "sources[].topic": ({"users.topic": "people"}, lambda c, s: c.landing / c.sources[0].topic),
    "sources[].format": (
        {"users.format": "cdcv2-json", "users.envelope": "materialize", "users.key": None,
         "users.include": None, "users.history": None,
         "users.expectations": None},
        lambda c, s: decoded(s, c, "users"),
    ),
    "sources[].key": ({"users.key": {"uid": "bigint"}}, lambda c, s: decoded(s, c, "users")),
    "sources[].key_encoding": (
        {"users.key_encoding": "text", "users.key": {"id": "string"}},
        lambda c, s: decoded(s, c, "users"),
    ),
    "sources[].value": ({"users.value": {"name": "string"}}, lambda c, s: decoded(s, c, "users")),
    "sources[].value_encoding": (
        {"users.value_encoding": "text", "users.value": {"name": "string"}},
        lambda c, s: decoded(s, c, "users"),
    ),
    "sources[].key_avro_schema": (
        {"payments.key_avro_schema": {"subject": "payments-key", "version": 2}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].key_avro_schema.file": (
        {"payments.key_avro_schema": {"file": "schemas/other-key.avsc", "id": 7}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].key_avro_schema.id": (
        {"payments.key_avro_schema": {"file": "schemas/payments-key.avsc", "id": 17}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].key_avro_schema.subject": (
        {"refunds.key_avro_schema": {"subject": "other-key", "version": 1}},
        lambda c, s: decoded(s, c, "refunds"),
    ),
    "sources[].key_avro_schema.version": (
        {"refunds.key_avro_schema": {"subject": "payments-key", "version": 2}},
        lambda c, s: decoded(s, c, "refunds"),
    ),
    "sources[].value_avro_schema": (
        {"payments.value_avro_schema": {"file": "schemas/other.avsc", "id": 8}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].value_avro_schema.file": (
        {"refunds.value_avro_schema": {"file": "schemas/other.avsc", "id": 8}},
        lambda c, s: decoded(s, c, "refunds"),
    ),
    "sources[].value_avro_schema.id": (
        {"refunds.value_avro_schema": {"file": "schemas/payments-value.avsc", "id": 9}},
        lambda c, s: decoded(s, c, "refunds"),
    ),
    "sources[].value_avro_schema.subject": (
        {"payments.value_avro_schema": {"subject": "other-value"}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].value_avro_schema.version": (
        {"payments.value_avro_schema": {"subject": "payments-value", "version": 1}},
        lambda c, s: decoded(s, c, "payments"),
    ),
    "sources[].envelope": (  # a NONE source keeps no history: its changes are one
        {"users.envelope": "none", "users.history": None}, lambda c, s: decoded(s, c, "users")
    ),
    "sources[].include": (  # the example's headers left out
        {"users.include": ["timestamp"]}, lambda c, s: decoded(s, c, "users")
    ),
    "sources[].reclock": ({"users.reclock": "arrival"}, lambda c, s: users(c).reclock),
    "sources[].allow_offset_gaps": (
        {"users.allow_offset_gaps": True}, lambda c, s: users(c).allow_offset_gaps
    ),
    "sources[].sink_stores": (
        {"users.sink_stores": ["keys"]}, lambda c, s: _sink_value_file_waits(s, c)
    ),
    "sources[].start_offsets": (
        {"users.start_offsets": {0: 5}}, lambda c, s: configured_starts(users(c))
    ),
    "sources[].retire": ({"users.retire": "delete"}, lambda c, s: users(c).retire),
    "sources[].stall_after": ({"users.stall_after": "10m"}, lambda c, s: _stalled(c)),
    "sources[].expectations": (
        {"users.expectations": None}, lambda c, s: _expectations_pass(s, c)
    ),
    "sources[].expectations[].type": (
        {"users.expectations": [{"type": "expect_column_values_to_be_null",
                                 "kwargs": {"column": "id"}}]},
        lambda c, s: _expectations_pass(s, c),
    ),
    "sources[].expectations[].kwargs": (
        {"users.expectations": [{"type": "expect_column_values_to_not_be_null",
                                 "kwargs": {"column": "tier"}}]},
        lambda c, s: _expectations_pass(s, c),
    ),
    "sources[].owners": ({"users.owners": ["team:other"]}, lambda c, s: users(c).owners),
    "sources[].history": ({"users.history": None}, lambda c, s: published_tables(users(c))),
    "sources[].retention": ({"users.retention": "1d"}, lambda c, s: _horizons(c)),
    "transactions": ({"transactions": None}, lambda c, s: _group_binding(s, c)),
    "transactions[].name": ({"transactions.name": "store"}, lambda c, s: _group_binding(s, c)),
    "transactions[].topic": ({"transactions.topic": "store.transaction"},
                             lambda c, s: _group_binding(s, c)),
    "transactions[].sources": ({"transactions.sources": {"orders": "inventory.orders"}},
                               lambda c, s: _group_binding(s, c)),
    "transactions[].timeout": ({"transactions.timeout": "1h"},
                               lambda c, s: transaction_binder(s, c, c.lake, "orders").timeout_ms),
}  # fmt: skip


def _registered(spark: SparkSession, config: Config) -> tuple | None:
    """Where ``users``' state would be registered: the metastore's kind and the name."""
    registration = Registration.of(spark, config, users(config), config.lake / "users")
    if registration is None:
        return None
    return type(registration.metastore).__name__, registration.name("state")


def _glue_client(spark: SparkSession, config: Config) -> tuple | None:
    """Which Glue endpoint and region the registration would call (None: not Glue)."""
    registration = Registration.of(spark, config, users(config), config.lake / "users")
    if not isinstance(registration.metastore, GlueMetastore):
        return None
    client = registration.metastore.client
    return client.meta.endpoint_url, client.meta.region_name


def _reach() -> tuple[dict | None, dict]:
    """What delta-rs and Spark are told to reach an s3:// lake, after the config loaded
    (keys given in the config only: their default comes from the environment)."""
    lake = "s3://bucket/lake"
    return delta_options(lake), spark_conf(Location.parse(lake))


def _stalled(config: Config) -> int:
    """How many partitions the accounted check calls stalled when a dump has waited 30
    minutes unbound."""
    waiting = HeldPartition(0, 0, 1, waiting_since_ms=0, reason="offset gap")
    return len(overdue([waiting], 30 * 60_000, users(config).stall_after_ms))


def _group_binding(spark: SparkSession, config: Config) -> tuple | None:
    """Where the group of ``orders`` keeps its bindings, which topic's END records it
    reads, and which data collection it counts for each member (None: no group)."""
    binder = transaction_binder(spark, config, config.lake, "orders")
    if binder is None:
        return None
    members = {name: m.collection for name, m in binder.members.items()}
    return binder.bindings.path, binder.registry.topic, members


def _sink_value_file_waits(spark: SparkSession, config: Config) -> list[tuple]:
    """What a Kafka Connect sink value file of ``users`` that landed alone waits for."""
    topic = users(config).topic
    value = config.landing / topic / "partition=0" / f"{topic}+0+0000000000.json"
    if not value.exists():  # the probe runs twice: the file lands once
        value.parent.mkdir(parents=True, exist_ok=True)
        value.write_text('{"name": "n", "email": "e", "tier": "free"}\n')
    registry = source_registry(config.lake, users(config))
    registry.register(spark, list_dump_files(config.landing, topic), arrival_ms=0)
    return [f.waiting_for for f in registry.files()]


def _expectations_pass(spark: SparkSession, config: Config) -> bool:
    rows = spark.createDataFrame(
        [(None, "n", "e", "pro")], "id long, name string, email string, tier string"
    )
    return validate(rows, users(config).expectations, name="users").success


def variant(example: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    """The example with ``change`` applied: ``a.b`` paths, ``<source>.<key>`` for sources."""
    data = copy.deepcopy(example)
    by_name = {source["name"]: source for source in data["sources"]}
    for path, value in change.items():
        head, _, rest = path.partition(".")
        if path == "sources":
            data["sources"] = [by_name["users"]]
            continue
        if head == "transactions" and rest:
            data["transactions"][0][rest] = value
            continue
        target = by_name.get(head, data)
        key = rest if head in by_name else path
        *parents, last = key.split(".") if head not in by_name and "." in key else [key]
        for part in parents:
            target = target[part]
        if value is None:
            target.pop(last, None)
        else:
            target[last] = value
    return data


def test_every_documented_option_has_a_probe() -> None:
    documented = document_fields(documented_example(), config_schema())
    assert documented == set(PROBES)


@pytest.mark.parametrize("option", sorted(PROBES))
def test_each_documented_option_changes_what_the_engine_does(
    spark: SparkSession, tmp_path: Path, option: str
) -> None:
    schemas(tmp_path)
    change, probe = PROBES[option]
    example = documented_example()
    # Loaded as a run loads it: parsed, then its storage settings made the process's.
    before = probe(use_config(parse_config(example, tmp_path)), spark)
    after = probe(use_config(parse_config(variant(example, change), tmp_path)), spark)
    assert before != after, f"{option}: {before!r}"
