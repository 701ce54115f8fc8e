"""The Debezium PostgreSQL and MySQL connectors' reference change events, as their
documentation prints them, through both Debezium envelopes, in both forms of Kafka
Connect's JSON converter (``schemas.enable`` true: ``{"schema", "payload"}``; false: the
payload alone).

Restated from the connectors' documentation (debezium/debezium,
``documentation/modules/ROOT/pages/connectors/postgresql.adoc`` and the MySQL connector's
shared ``partials/modules/all-connectors/shared-mariadb-mysql.adoc``), the ``customers``
table ``(id, first_name, last_name, email)``: the create, update and delete events and
the truncate event of each, with the fields the envelopes read. Postgres's update and
delete events are printed for REPLICA IDENTITY DEFAULT (the before image holds the key
alone) and without ``source.sequence``; the FULL events give the before image the whole
row, as the documentation says ``ALTER TABLE customers REPLICA IDENTITY FULL`` would. The
snapshot reads (``op: r``) and the events the documentation does not print (a second
row, a later truncate position) follow the printed events' shape; MySQL's truncate is
printed at its update's binlog position, so it is restated at a later one.

Every expected table is written by hand from the documented meaning of the events:
``c``, ``r`` insert; ``u`` replaces; ``d`` deletes and its tombstone carries nothing;
``t`` empties the table, and the window's events after it apply to the empty table.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdc_core.envelopes import apply_debezium, apply_debezium_upsert, output_schema
from tests.envelopes.test_envelope_support import Run, batched, error

KEY = StructType([StructField("id", LongType())])
CUSTOMERS = StructType(
    [StructField("id", LongType()), *(StructField(c, StringType()) for c in
                                      ("first_name", "last_name", "email"))]
)  # fmt: skip

# The Kafka Connect schemas a converter with schemas.enable=true writes beside the
# payloads (abridged to the fields the envelopes read; the payload is what they decode).
KEY_SCHEMA = {"type": "struct", "optional": False, "name": "server.inventory.customers.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}  # fmt: skip
ROW_SCHEMA = {"type": "struct", "optional": True, "name": "server.inventory.customers.Value",
              "fields": [{"type": "int32", "optional": False, "field": "id"},
                         *({"type": "string", "optional": False, "field": c}
                           for c in ("first_name", "last_name", "email"))]}  # fmt: skip
VALUE_SCHEMA = {"type": "struct", "optional": False, "name": "server.inventory.customers.Envelope",
                "fields": [{**ROW_SCHEMA, "field": "before"}, {**ROW_SCHEMA, "field": "after"},
                           {"type": "struct", "optional": False, "field": "source",
                            "fields": []},
                           {"type": "string", "optional": False, "field": "op"},
                           {"type": "int64", "optional": True, "field": "ts_ms"}]}  # fmt: skip


def record(offset: int, key: int | None, value: dict | None, schemas: bool) -> tuple:
    """A Kafka record of partition 0 in the converter's form."""
    key_json = None if key is None else {"id": key}
    if schemas:
        key_json = None if key is None else {"schema": KEY_SCHEMA, "payload": key_json}
        value = None if value is None else {"schema": VALUE_SCHEMA, "payload": value}
    return (0, offset, key_json, value)


ANNE = {"id": 1, "first_name": "Anne", "last_name": "Kretchmar", "email": "annek@noanswer.org"}
ANNE_MARIE = {**ANNE, "first_name": "Anne Marie"}


def row(image: dict) -> tuple:
    return (image["id"], image["first_name"], image["last_name"], image["email"])


# ---- PostgreSQL (connector "postgresql", server PostgreSQL_server, schema public) ----


def pg_source(lsn: int, *, snapshot: object = False, tx: int = 556,
              commit: int | None = None, sequence: bool = True) -> dict:  # fmt: skip
    source = {"version": "2.7.0.Final", "connector": "postgresql", "name": "PostgreSQL_server",
              "ts_ms": 1559033904863, "snapshot": snapshot, "db": "postgres",
              "schema": "public", "table": "customers", "txId": tx, "lsn": lsn,
              "xmin": None}  # fmt: skip
    if sequence:
        last = None if commit is None else str(commit)
        source["sequence"] = json.dumps([last, str(lsn)])
    return source


def pg_event(op: str, before: dict | None, after: dict | None, source: dict) -> dict:
    event = {"before": before, "after": after, "source": source, "op": op,
             "ts_ms": 1465584025523}  # fmt: skip
    return event if op != "t" else {"source": source, "op": op, "ts_ms": 1559033904961}


# The documented create: a snapshot record (``snapshot: true``), sequence and lsn given.
PG_CREATE = pg_event("c", None, ANNE, {**pg_source(24023128, snapshot=True, tx=555),
                                       "sequence": '["24023119","24023128"]'})
PG_READ = pg_event("r", None, {"id": 2, "first_name": "Sally", "last_name": "Thomas",
                               "email": "sally.thomas@acme.com"},
                   pg_source(24023100, snapshot="true", tx=554))  # fmt: skip
# The documented update and delete (REPLICA IDENTITY DEFAULT, no source.sequence).
PG_UPDATE_DEFAULT = pg_event("u", {"id": 1}, ANNE_MARIE, pg_source(24023128, sequence=False))
PG_DELETE_DEFAULT = pg_event("d", {"id": 1}, None, pg_source(46523128, sequence=False))
# The same with the sequence today's connector writes (last commit LSN, LSN).
PG_UPDATE_DEFAULT_SEQ = pg_event("u", {"id": 1}, ANNE_MARIE, pg_source(24023140, commit=24023130))
PG_DELETE_DEFAULT_SEQ = pg_event("d", {"id": 1}, None, pg_source(24023160, commit=24023150))
# REPLICA IDENTITY FULL: the before image is the whole row.
PG_UPDATE_FULL = pg_event("u", ANNE, ANNE_MARIE, pg_source(24023180, commit=24023170))
PG_DELETE_FULL = pg_event("d", ANNE_MARIE, None, pg_source(24023200, commit=24023190))
PG_CREATE_3 = pg_event("c", None, {**ANNE, "id": 3}, pg_source(24023220, commit=24023210))
# The documented truncate (null key), with its sequence.
PG_TRUNCATE = pg_event("t", None, None, pg_source(46523128, commit=46523120))
PG_CREATE_4 = pg_event("c", None, {**ANNE, "id": 4}, pg_source(46523140, commit=46523130))

POSITION_MISSING = (
    "constraint violated: source position: a streaming postgresql event lacks "
    "source.sequence, which the deduplication orders by (the Debezium PostgreSQL connector "
    "writes source.sequence from version 1.5 on, and source.lsn with every streamed event)"
)
FULL_IMAGES = (
    "a before image must be the whole row: Postgres needs REPLICA IDENTITY FULL "
    "(ALTER TABLE ... REPLICA IDENTITY FULL), MySQL binlog_row_image=FULL"
)
ANNE_JSON = '{"id":1,"first_name":"Anne","last_name":"Kretchmar","email":"annek@noanswer.org"}'


def partial_before(op: str) -> str:
    return (
        f"constraint violated: before image: op '{op}' retracts {{\"id\":1}} but its key "
        f"holds {ANNE_JSON}; {FULL_IMAGES}"
    )


def postgres_windows(schemas: bool) -> list[list[tuple]]:
    """Window 1: the snapshot; 2: the documented DEFAULT update and delete, without and
    with a sequence; 3: the FULL ones, the tombstone, a create, the truncate, a create."""
    def at(offset: int, key: int | None, value: dict | None) -> tuple:
        return record(offset, key, value, schemas)

    return [
        [at(0, 2, PG_READ), at(1, 1, PG_CREATE)],
        [at(2, 1, PG_UPDATE_DEFAULT), at(3, 1, PG_DELETE_DEFAULT),
         at(4, 1, PG_UPDATE_DEFAULT_SEQ), at(5, 1, PG_DELETE_DEFAULT_SEQ)],
        [at(6, 1, PG_UPDATE_FULL), at(7, 1, PG_DELETE_FULL), at(8, 1, None),
         at(9, 3, PG_CREATE_3), at(10, None, PG_TRUNCATE), at(11, 4, PG_CREATE_4)],
    ]  # fmt: skip


SALLY_2 = (2, "Sally", "Thomas", "sally.thomas@acme.com")


# ---- MySQL (connector "mysql", server mysql-server-1, binlog mysql-bin.000003) ----


def my_source(pos: int, row_: int = 0, *, snapshot: object = False) -> dict:
    return {"version": "2.7.0.Final", "connector": "mysql", "name": "mysql-server-1",
            "ts_ms": 1465581029100, "snapshot": snapshot, "db": "inventory",
            "table": "customers", "server_id": 223344, "gtid": None,
            "file": "mysql-bin.000003", "pos": pos, "row": row_, "thread": 7}  # fmt: skip


def my_event(op: str, before: dict | None, after: dict | None, source: dict) -> dict:
    if op == "t":
        return {"source": source, "op": op, "ts_ms": 1465581029523}
    return {"op": op, "ts_ms": 1465491411815, "before": before, "after": after,
            "source": source}  # fmt: skip


ANNE_1004 = {**ANNE, "id": 1004}
ANNE_MARIE_1004 = {**ANNE_MARIE, "id": 1004}
SALLY = {"id": 1001, "first_name": "Sally", "last_name": "Thomas",
         "email": "sally.thomas@acme.com"}  # fmt: skip
SAL = {**SALLY, "first_name": "Sal"}
MY_READ = my_event("r", None, SALLY, my_source(154, snapshot="true"))
MY_CREATE = my_event("c", None, ANNE_1004, my_source(154))  # the documented create
MY_UPDATE = my_event("u", ANNE_1004, ANNE_MARIE_1004, my_source(484))  # documented
MY_UPDATE_ROW_1 = my_event("u", SALLY, SAL, my_source(484, 1))  # a second row, same event
MY_DELETE = my_event("d", ANNE_MARIE_1004, None, my_source(805))  # documented
MY_TRUNCATE = my_event("t", None, None, my_source(1106))  # documented, at a later position
MY_CREATE_1005 = my_event("c", None, {**ANNE, "id": 1005}, my_source(1200))


def mysql_windows(schemas: bool) -> list[list[tuple]]:
    """Window 1: a snapshot read, the documented create; 2: the documented update (and a
    second row of its binlog event), delete and tombstone, then all of it re-sent after a
    connector restart; 3: the truncate and a create after it."""
    def at(offset: int, key: int | None, value: dict | None) -> tuple:
        return record(offset, key, value, schemas)

    changes = [(1004, MY_UPDATE), (1001, MY_UPDATE_ROW_1), (1004, MY_DELETE), (1004, None)]
    return [
        [at(0, 1001, MY_READ), at(1, 1004, MY_CREATE)],
        [at(2 + i, key, value) for i, (key, value) in enumerate(changes + changes)],
        [at(10, None, MY_TRUNCATE), at(11, 1005, MY_CREATE_1005)],
    ]


# What each window changes, by hand: the same for both envelopes, but for the events
# classic DEBEZIUM refuses (Postgres's window 2).
POSTGRES_UPSERT = [
    ([SALLY_2 + (1,), row(ANNE) + (1,)], []),
    ([row(ANNE) + (-1,)], []),  # key 1's latest event deletes it
    ([SALLY_2 + (-1,), (4, "Anne", "Kretchmar", "annek@noanswer.org", 1)], []),
]
POSTGRES_CLASSIC = [
    ([SALLY_2 + (1,), row(ANNE) + (1,)], []),
    ([], [error(0, 2, {"id": 1}, POSITION_MISSING, 1), error(0, 3, {"id": 1}, POSITION_MISSING, 1),
          error(0, 4, {"id": 1}, partial_before("u"), 1),
          error(0, 5, {"id": 1}, partial_before("d"), 1)]),
    ([row(ANNE) + (-1,), SALLY_2 + (-1,), (4, "Anne", "Kretchmar", "annek@noanswer.org", 1)], []),
]  # fmt: skip
MYSQL_BOTH = [
    ([row(SALLY) + (1,), row(ANNE_1004) + (1,)], []),
    ([row(ANNE_1004) + (-1,), row(SALLY) + (-1,), row(SAL) + (1,)], []),
    ([row(SAL) + (-1,), (1005, "Anne", "Kretchmar", "annek@noanswer.org", 1)], []),
]

# Each connector and envelope once, each in one converter form (both forms per connector
# and per envelope).
CASES = {
    "postgres debezium-upsert, schemas.enable=true": (
        apply_debezium_upsert, postgres_windows(True), POSTGRES_UPSERT),
    "postgres debezium, schemas.enable=false": (
        apply_debezium, postgres_windows(False), POSTGRES_CLASSIC),
    "mysql debezium-upsert, schemas.enable=false": (
        apply_debezium_upsert, mysql_windows(False), MYSQL_BOTH),
    "mysql debezium, schemas.enable=true": (apply_debezium, mysql_windows(True), MYSQL_BOTH),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_documented_events_give_the_documented_table(spark, case: str) -> None:
    apply, windows, expected = CASES[case]
    envelope = "debezium" if apply is apply_debezium else "debezium-upsert"
    run = Run(
        spark, output_schema(envelope, KEY, CUSTOMERS),
        batched(apply, key_schema=KEY, value_schema=CUSTOMERS),
    )  # fmt: skip
    step = run.dedup_window if envelope == "debezium" else run.upsert_window
    for index, (records, (changes, errors)) in enumerate(zip(windows, expected, strict=True)):
        got_changes, got_errors = step(10 * (index + 1), records)
        assert got_changes == sorted(changes, key=repr), f"window {index + 1}"
        assert got_errors == sorted(errors, key=repr), f"window {index + 1}"
    published = {row_[0] for row_ in run.state()}
    assert published == ({4} if case.startswith("postgres") else {1005})
    assert all(count == 1 for *_, count in run.state())
