"""Paths a config names: what may lie outside the config's folder, and what may not
climb out of the folder it names.

Schema files may lie anywhere, as the lake and the landing zone may: the config is
trusted input (its author already chooses where reclock reads and writes). What the
config names inside a folder stays inside it: a subject is one folder of
``schema_folder``, and a topic is one folder of the landing zone (``.`` and ``..``, which
Kafka refuses as topic names too, would be the landing zone or its parent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdc_core.config import ConfigError, load_config
from tests.upsert_config import write_upsert_config

VALUE_AVRO = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]}


def entry(schema_id: int) -> str:
    """A subject version as the registry serves it."""
    return json.dumps({"id": schema_id, "schema": json.dumps(VALUE_AVRO)})


def avro_source(reference: dict) -> dict:
    return {"value_encoding": "avro", "value_avro_schema": reference}


def test_a_schema_file_outside_the_config_folder_is_read(tmp_path: Path) -> None:
    work, elsewhere = tmp_path / "deploy", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (elsewhere / "value.avsc").write_text(json.dumps(VALUE_AVRO))
    for file in ("../elsewhere/value.avsc", str(elsewhere / "value.avsc")):
        config = load_config(write_upsert_config(work, source=avro_source({"file": file, "id": 9})))
        schema = config.source("users").avro_schema("value", config.schema_folder)
        assert (schema.schema_id, schema.schema) == (9, VALUE_AVRO)


@pytest.mark.parametrize("subject", ["../outside", "users/../../outside", ".", "..", "a/b"])
def test_a_subject_never_climbs_out_of_the_schema_folder(tmp_path: Path, subject: str) -> None:
    for folder, schema_id in (("schemas/users-value", 1), ("outside", 2), ("schemas/a/b", 3)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "1.json").write_text(entry(schema_id))
    path = write_upsert_config(
        tmp_path, source=avro_source({"subject": subject}), schema_folder="schemas"
    )
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert refused.value.field == "sources[0].value_avro_schema"
    assert "is not a folder name in" in str(refused.value)


def test_a_subject_in_the_schema_folder_is_read(tmp_path: Path) -> None:
    (tmp_path / "schemas" / "users-value").mkdir(parents=True)
    (tmp_path / "schemas" / "users-value" / "1.json").write_text(entry(5))
    config = load_config(write_upsert_config(
        tmp_path, source=avro_source({"subject": "users-value"}), schema_folder="schemas"
    ))  # fmt: skip
    assert config.source("users").avro_schema("value", config.schema_folder).schema_id == 5


@pytest.mark.parametrize("topic", [".", ".."])
def test_a_topic_never_names_the_landing_zone_or_its_parent(tmp_path: Path, topic: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(write_upsert_config(tmp_path, source={"topic": topic}))
    assert refused.value.field == "sources[0].topic"
    assert "is not a Kafka topic name" in str(refused.value)
