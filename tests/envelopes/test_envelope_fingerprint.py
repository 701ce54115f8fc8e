"""Config drift: stable fingerprints, a description of what changed, a refusal that says
how to reset."""

from __future__ import annotations

import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from cdc_core.envelopes import (
    ConfigDriftError,
    appended_value_columns,
    check_fingerprint,
    describe_drift,
    fingerprint,
)

KEY = StructType([StructField("id", LongType())])
VALUE = StructType([StructField("name", StringType()), StructField("n", IntegerType())])


def test_fingerprint_is_stable_text() -> None:
    rebuilt = StructType([StructField("name", StringType()), StructField("n", IntegerType())])
    assert fingerprint("upsert", KEY, VALUE) == fingerprint("upsert", KEY, rebuilt)
    assert fingerprint("upsert", KEY, VALUE) != fingerprint("none", KEY, VALUE)


def test_drift_names_every_change() -> None:
    new_value = StructType(
        [
            StructField("name", StringType(), nullable=False),
            StructField("email", StringType()),
        ]
    )
    new_key = StructType([StructField("uid", LongType())])
    drift = describe_drift(
        fingerprint("upsert", KEY, VALUE), fingerprint("debezium-upsert", new_key, new_value)
    )
    assert drift == (
        "envelope changed from upsert to debezium-upsert; "
        "key columns changed from ['id'] to ['uid']; "
        "key column 'id' removed; key column 'uid' added (bigint); "
        "value column 'n' removed; value column 'email' added (string); "
        "value column 'name' changed from string to string not null"
    )
    same = fingerprint("upsert", KEY, VALUE)
    assert describe_drift(same, same) == "no change"
    assert describe_drift("garbage", same).startswith("the stored fingerprint is unreadable")


def test_a_changed_fingerprint_is_refused_with_what_changed_and_how_to_reset() -> None:
    old = fingerprint("upsert", KEY, VALUE)
    check_fingerprint(None, old)
    check_fingerprint(old, fingerprint("upsert", KEY, VALUE))
    widened = StructType([StructField("name", StringType()), StructField("n", LongType())])
    with pytest.raises(ConfigDriftError) as refused:
        check_fingerprint(old, fingerprint("upsert", KEY, widened))
    message = str(refused.value)
    assert "value column 'n' changed from int to bigint" in message
    assert "restore the previous configuration" in message
    assert "reclock rebuild --config FILE --source NAME" in message
    assert "give the source a new name" in message


def test_only_nullable_value_columns_appended_may_evolve() -> None:
    old = fingerprint("upsert", KEY, VALUE)
    email = StructField("email", StringType())
    required = StructField("email", StringType(), nullable=False)
    appended = StructType([*VALUE.fields, email])
    assert appended_value_columns(old, old) == ()
    assert appended_value_columns(old, fingerprint("upsert", KEY, appended)) == (email,)
    for drifted in (
        fingerprint("upsert", KEY, StructType([email, *VALUE.fields])),  # not at the end
        fingerprint("upsert", KEY, StructType([*VALUE.fields, required])),  # not nullable
        fingerprint("upsert", KEY, StructType(VALUE.fields[:1])),  # removed
        fingerprint("none", KEY, appended),  # another envelope
        fingerprint("upsert", StructType([StructField("id", StringType())]), appended),
        "garbage",
    ):
        assert appended_value_columns(old, drifted) is None
