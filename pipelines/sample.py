"""Deterministic, realistic Kafka dumps: the bundled demo and the benchmark generator.

Every topic is built the same way: a stream of produced messages (in production
order) gets per-partition offsets and is then cut into dump files the way a fleet of
kcat consumers would leave them behind:

* file ``c`` holds the ``c``-th slice of the stream; the tail of each slice is written
  again at the head of the next file (a consumer restarted from an older commit), so
  offset ranges overlap and records are redelivered;
* in the middle of each slice a short run of one partition's records is missing and
  arrives in the next file instead (records arriving late, in another file);
* files get random names in several sub-folders, every third one is gzipped, and their
  modification times (arrival) are not in offset order for some neighbours.

Everything is derived from the seed, so the same seed writes identical bytes.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import random
import struct
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

import fastavro
import yaml

# The C string encoder behind json.dumps(str), without its per-call overhead.
_json_string = json.encoder.encode_basestring_ascii

SAMPLE_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SAMPLE_WINDOW_MS = 60_000
SAMPLE_WINDOWS = 8
SAMPLE_PARTITIONS = 3
SCHEMA_FOLDER = "schemas"  # beside the demo's config: the payments topic's Avro schemas

# Columns of the generated upsert (users) topic, for configs that read it.
UPSERT_KEY_SCHEMA = {"id": "bigint"}
UPSERT_VALUE_SCHEMA = {"name": "string", "email": "string", "tier": "string", "visits": "bigint"}
ORDERS_VALUE_SCHEMA = {
    "id": "bigint",
    "customer_id": "bigint",
    "status": "string",
    "amount": "double",
}
ORDER_LINES_VALUE_SCHEMA = {
    "id": "bigint",
    "order_id": "bigint",
    "sku": "string",
    "quantity": "bigint",
}
CLICKS_VALUE_SCHEMA = {"user_id": "bigint", "url": "string"}
# The Debezium connector's transaction topic, and the tables its transactions write.
TRANSACTION_TOPIC = "shop.transaction"
DATA_COLLECTIONS = {"orders": "public.orders", "order_lines": "public.order_lines"}
MAX_LINE_DELAY_MS = 9_000  # an order's lines are written this much later at most

LATE_SHARE = 0.02  # of each file's slice: records of one partition that arrive a file later
JITTER_SHARE = 0.03  # of records whose producer timestamp lags behind their predecessor's
MAX_JITTER_MS = 2_000
ARRIVAL_DELAY_MS = 15_000  # a dump file lands this long after its newest record
WRITE_BUFFER_BYTES = 1 << 20  # batch lines before they reach the gzip compressor
SUB_FOLDERS = ("", "consumer-b", "consumer-c/retry")

# Plain-ASCII-or-accented vocabularies without quotes or backslashes, so values can be
# spliced into JSON text without escaping (which keeps the benchmark generator fast).
FIRST_NAMES = (
    "Ada",
    "Grace",
    "Linus",
    "Zoë",
    "Edsger",
    "Barbara",
    "Ken",
    "Frances",
    "Tony",
    "Radia",
    "Niklaus",
    "Margaret",
    "José",
    "Hedy",
    "Dennis",
    "Sophie",
)
LAST_NAMES = (
    "Lovelace",
    "Hopper",
    "Torvalds",
    "Dijkstra",
    "Liskov",
    "Thompson",
    "Allen",
    "Hoare",
    "Perlman",
    "Wirth",
    "Hamilton",
    "Núñez",
    "Lamarr",
    "Ritchie",
)
TIERS = ("free", "pro", "enterprise")
ORDER_STATUSES = ("pending", "paid", "shipped", "delivered")


class Message(NamedTuple):
    """A produced Kafka message before it gets an offset; key/payload are JSON text or None."""

    partition: int
    ts: int
    key: str | None
    payload: str | None


class Shop(NamedTuple):
    """The shop database through Debezium: its two tables' topics and the connector's
    transaction topic (BEGIN/END records)."""

    orders: list[Message]
    order_lines: list[Message]
    transactions: list[Message]


class Record(NamedTuple):
    """A Kafka record: a message at its offset."""

    partition: int
    offset: int
    ts: int
    key: str | None
    payload: str | None


def write_sample(workdir: Path, seed: int = 7) -> Path:
    """Write the bundled demo (dumps under ``<workdir>/landing``) and its config; return the
    config path. Topics: ``users`` (upsert), ``orders`` and ``order_lines`` (Debezium Postgres,
    debezium-upsert, one transaction group with the connector's ``shop.transaction``),
    ``clicks`` (no envelope), ``payments`` (Avro keys and values in the Confluent wire
    format, upsert; schemas under ``<workdir>/schemas``) and ``pageviews`` (Kafka Connect
    sink files, no envelope), 3 partitions each, over 8 one-minute windows."""
    workdir = Path(workdir)
    landing = workdir / "landing"
    span_ms = SAMPLE_WINDOWS * SAMPLE_WINDOW_MS

    users = random.Random(f"{seed}:users")
    user_messages = list(
        _with_user_anomalies(
            upsert_messages(
                users,
                records=1600,
                keys=120,
                partitions=SAMPLE_PARTITIONS,
                start_ms=SAMPLE_START_MS,
                span_ms=span_ms,
                delete_fraction=0.08,
            ),
            users,
            keys=120,
            partitions=SAMPLE_PARTITIONS,
        )
    )
    _write_topic(landing, "users", user_messages, users, files=6, malformed=1)

    orders = random.Random(f"{seed}:orders")
    lines = random.Random(f"{seed}:order_lines")
    shop = debezium_order_messages(
        orders, lines, snapshot_rows=40, changes=450, start_ms=SAMPLE_START_MS, span_ms=span_ms
    )
    _write_topic(landing, "orders", shop.orders, orders, files=5)
    _write_topic(landing, "order_lines", shop.order_lines, lines, files=3)
    _write_topic(landing, TRANSACTION_TOPIC, shop.transactions, lines, files=2)

    clicks = random.Random(f"{seed}:clicks")
    click_messages = list(
        click_stream(clicks, records=400, start_ms=SAMPLE_START_MS, span_ms=span_ms)
    )
    _write_topic(landing, "clicks", click_messages, clicks, files=3)

    payments = random.Random(f"{seed}:payments")
    write_payment_schemas(workdir / SCHEMA_FOLDER)
    payment_messages = list(
        avro_payment_messages(payments, records=360, start_ms=SAMPLE_START_MS, span_ms=span_ms)
    )
    _write_topic(landing, "payments", payment_messages, payments, files=4)

    pageviews = random.Random(f"{seed}:pageviews")
    pageview_messages = click_stream(
        pageviews, records=360, start_ms=SAMPLE_START_MS, span_ms=span_ms
    )
    write_connect_sink_files(landing / "pageviews", "pageviews", pageview_messages, pageviews)

    config_path = workdir / "reclock.yaml"
    config_path.write_text(sample_config_yaml(), encoding="utf-8")
    return config_path


def sample_config_yaml(schemas: str = SCHEMA_FOLDER) -> str:
    """The config ``write_sample`` writes beside the demo's dumps; ``schemas``: the folder
    of the payments topic's Avro schemas (relative to the config, or absolute)."""
    return _sample_config_yaml(SAMPLE_START_MS + SAMPLE_WINDOWS * SAMPLE_WINDOW_MS, schemas)


def generate_dumps(
    landing: Path,
    topic: str,
    *,
    records: int,
    keys: int,
    partitions: int,
    windows: int,
    window_ms: int,
    start_ms: int,
    delete_fraction: float,
    redelivery_fraction: float,
    files: int,
    seed: int,
) -> None:
    """Write an upsert topic (key ``{"id": n}``, values ``UPSERT_VALUE_SCHEMA``) as dumps
    under ``<landing>/<topic>/``, streaming: memory stays bounded whatever ``records`` is."""
    for name, value in (
        ("records", records),
        ("keys", keys),
        ("partitions", partitions),
        ("windows", windows),
        ("window_ms", window_ms),
        ("files", files),
    ):
        if value < 1:
            raise ValueError(f"{name} must be at least 1 (got {value})")
    for name, share in (
        ("delete_fraction", delete_fraction),
        ("redelivery_fraction", redelivery_fraction),
    ):
        if not 0 <= share < 1:
            raise ValueError(f"{name} must be in [0, 1) (got {share})")
    rng = random.Random(f"{seed}:{topic}")
    messages = upsert_messages(
        rng,
        records=records,
        keys=keys,
        partitions=partitions,
        start_ms=start_ms,
        span_ms=windows * window_ms,
        delete_fraction=delete_fraction,
    )
    write_dump_files(
        Path(landing) / topic,
        topic,
        with_offsets(messages),
        rng,
        total=records,
        files=files,
        partitions=partitions,
        redelivery_fraction=redelivery_fraction,
    )


def key_partition(key_id: int, partitions: int) -> int:
    """The partition of a key, as a key-hashing producer would pick it (stable, well mixed)."""
    return ((key_id * 2_654_435_761) & 0xFFFF_FFFF) * partitions >> 32


def upsert_messages(
    rng: random.Random,
    *,
    records: int,
    keys: int,
    partitions: int,
    start_ms: int,
    span_ms: int,
    delete_fraction: float,
) -> Iterator[Message]:
    """Random inserts/updates/deletes (null payloads) of user rows, spread evenly over
    ``[start_ms, start_ms + span_ms)``; a few timestamps lag a little (producer clocks)."""
    visits = 0
    for index in range(records):
        key_id = _pick(rng, keys)
        payload = None
        if rng.random() >= delete_fraction:
            visits += 1
            first = FIRST_NAMES[_pick(rng, len(FIRST_NAMES))]
            last = LAST_NAMES[_pick(rng, len(LAST_NAMES))]
            payload = (
                f'{{"name":"{first} {last}","email":"{first}.{last}{key_id}@example.com",'
                f'"tier":"{TIERS[_pick(rng, len(TIERS))]}","visits":{visits}}}'
            )
        yield Message(
            key_partition(key_id, partitions),
            _timestamp(rng, start_ms, span_ms, index, records),
            f'{{"id":{key_id}}}',
            payload,
        )


def debezium_order_messages(
    rng: random.Random,
    lines_rng: random.Random,
    *,
    snapshot_rows: int,
    changes: int,
    start_ms: int,
    span_ms: int,
) -> Shop:
    """A Postgres ``public.orders`` table through Debezium: an initial snapshot (``op=r``,
    outside any transaction), then transactions of creates, updates and deletes (each delete
    followed by a null tombstone), and once a connector restart that re-sends the last few
    events. A transaction that creates an order also creates its lines in
    ``public.order_lines`` (``lines_rng`` draws them), written up to MAX_LINE_DELAY_MS
    later, so a window's end may fall between an order and its lines; every transaction
    has BEGIN and END records on the transaction topic."""
    table: dict[int, dict[str, object]] = {}
    messages: list[Message] = []
    lines: list[Message] = []
    transactions: list[Message] = []
    lsn = 24_000_000
    snapshot_ms = span_ms // 20
    last_ms = start_ms + span_ms - 1  # everything lies inside the sample's windows

    for order_id in range(1, snapshot_rows + 1):
        table[order_id] = _new_order(rng, order_id)
        ts = start_ms + snapshot_ms * (order_id - 1) // snapshot_rows
        marker = "last" if order_id == snapshot_rows else "true"
        source = pg_source(ts, marker, lsn, None, tx_id=700)
        messages.append(debezium_message(order_id, None, table[order_id], "r", source, ts))

    commit_lsn = lsn  # streaming continues from the snapshot's position
    replay_at = changes * 3 // 5
    next_id = snapshot_rows + 1
    next_line = 1
    tx_id = 701
    done = 0
    while done < changes:
        tx_events = min(rng.randint(1, 3), changes - done)
        txid = f"{tx_id}:{lsn + 1}"
        written: list[tuple[str, int]] = []  # (table, ts) of the transaction's events
        for _ in range(tx_events):
            ts = start_ms + snapshot_ms + (span_ms - snapshot_ms) * done // changes
            lsn += rng.randint(8, 400)
            source = pg_source(ts - rng.randint(5, 80), "false", lsn, commit_lsn, tx_id)
            roll = rng.random()
            in_tx = transaction_block(txid, written, "orders")
            written.append(("orders", ts))
            if not table or roll < 0.3:
                table[next_id] = _new_order(rng, next_id)
                messages.append(
                    debezium_message(next_id, None, table[next_id], "c", source, ts, in_tx)
                )
                for _ in range(lines_rng.randint(1, 3)):
                    line_ts = min(ts + lines_rng.randrange(MAX_LINE_DELAY_MS), last_ms)
                    line = _new_line(lines_rng, next_line, next_id)
                    line_source = {**source, "table": "order_lines", "ts_ms": line_ts}
                    line_tx = transaction_block(txid, written, "order_lines")
                    written.append(("order_lines", line_ts))
                    lines.append(
                        debezium_message(next_line, None, line, "c", line_source, line_ts, line_tx)
                    )
                    next_line += 1
                next_id += 1
            elif roll < 0.85:
                order_id = rng.choice(sorted(table))
                before = table[order_id]
                table[order_id] = _updated_order(rng, before)
                messages.append(
                    debezium_message(order_id, before, table[order_id], "u", source, ts, in_tx)
                )
            else:
                order_id = rng.choice(sorted(table))
                before = table.pop(order_id)
                messages.append(
                    debezium_message(order_id, before, None, "d", source, ts, in_tx)
                )
                messages.append(Message(messages[-1].partition, ts, messages[-1].key, None))
            done += 1
            if done == replay_at:
                messages.extend(_connector_restart(messages[-6:], ts))
        transactions += transaction_records(txid, written)
        commit_lsn = lsn
        tx_id += 1
    return Shop(messages, lines, transactions)


def transaction_block(
    txid: str, written: list[tuple[str, int]], table: str
) -> dict[str, object]:
    """The ``transaction`` block of the next event of ``table`` in a transaction that wrote
    ``written`` so far: its place in the transaction and among its table's events."""
    order = sum(1 for name, _ in written if name == table) + 1
    return {"id": txid, "total_order": len(written) + 1, "data_collection_order": order}


def transaction_records(
    txid: str, written: list[tuple[str, int]], collections: Mapping[str, str] = DATA_COLLECTIONS
) -> list[Message]:
    """The BEGIN and END records of a transaction that wrote ``(table, ts)`` events, as
    the connector writes them (one partition, keyed by the transaction id); ``collections``
    names each table's data collection."""
    counts = Counter(name for name, _ in written)
    begin_ms, end_ms = min(ts for _, ts in written), max(ts for _, ts in written)
    key = json.dumps({"id": txid})
    begin = {"status": "BEGIN", "id": txid, "event_count": None, "data_collections": None,
             "ts_ms": begin_ms}
    end = {"status": "END", "id": txid, "event_count": len(written), "ts_ms": end_ms,
           "data_collections": [{"data_collection": collections[name], "event_count": n}
                                for name, n in sorted(counts.items())]}
    return [Message(0, begin_ms, key, json.dumps(begin, separators=(",", ":"))),
            Message(0, end_ms, key, json.dumps(end, separators=(",", ":")))]  # fmt: skip


def click_stream(
    rng: random.Random, *, records: int, start_ms: int, span_ms: int
) -> Iterator[Message]:
    """Keyless page views, spread over the partitions by a sticky-style producer."""
    for index in range(records):
        page = rng.choice(("home", "pricing", "docs", "blog", "signup"))
        payload = f'{{"user_id":{rng.randrange(120)},"url":"/{page}"}}'
        partition = rng.randrange(SAMPLE_PARTITIONS)
        yield Message(partition, _timestamp(rng, start_ms, span_ms, index, records), None, payload)


PAYMENT_KEY_SCHEMA_ID = 101
PAYMENT_VALUE_SCHEMA_ID = 102
PAYMENT_KEY_AVRO = "long"
PAYMENT_VALUE_AVRO = {
    "type": "record",
    "name": "Payment",
    "namespace": "demo",
    "fields": [
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": {"type": "enum", "name": "Currency",
                                      "symbols": ["EUR", "USD", "CHF"]}},
        {"name": "memo", "type": ["null", "string"], "default": None},
    ],
}  # fmt: skip
PAYMENTS_VALUE_SCHEMA = {"amount": "double", "currency": "string", "memo": "string"}
CONNECT_FLUSH_RECORDS = 40  # records per sink file, as the sink's flush.size


def write_payment_schemas(folder: Path) -> None:
    """The payments topic's schemas as a user keeps them without a registry server: the
    key's as a schema file, the value's as a subject version (the registry's answer)."""
    (folder / "payments-value").mkdir(parents=True, exist_ok=True)
    (folder / "payments-key.avsc").write_text(json.dumps(PAYMENT_KEY_AVRO) + "\n")
    entry = {"subject": "payments-value", "version": 1, "id": PAYMENT_VALUE_SCHEMA_ID,
             "schema": json.dumps(PAYMENT_VALUE_AVRO)}  # fmt: skip
    (folder / "payments-value" / "1.json").write_text(json.dumps(entry) + "\n")


def confluent_avro(schema: dict[str, Any] | str, value: object, schema_id: int) -> str:
    """base64 text of the Confluent wire format (magic byte 0, schema id, Avro binary),
    as a kcat ``-J`` dump holds a binary Kafka key or value."""
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return base64.b64encode(out.getvalue()).decode("ascii")


def avro_payment_messages(
    rng: random.Random, *, records: int, start_ms: int, span_ms: int
) -> Iterator[Message]:
    """Payments keyed by id, some refunded (deleted); two records are damaged on the way:
    one written with another schema id, one cut short (each lands in ``errors``)."""
    damaged = {records // 3: "other schema", 2 * records // 3: "cut short"}
    for index in range(records):
        payment_id = _pick(rng, 90)
        value: dict[str, object] | None = {
            "amount": round(rng.uniform(1, 500), 2),
            "currency": rng.choice(("EUR", "USD", "CHF")),
            "memo": rng.choice((None, "invoice", "refund pending")),
        }
        if rng.random() < 0.06 and index not in damaged:
            value = None
        payload = None
        if value is not None:
            schema_id = PAYMENT_VALUE_SCHEMA_ID + (damaged.get(index) == "other schema")
            payload = confluent_avro(PAYMENT_VALUE_AVRO, value, schema_id)
            if damaged.get(index) == "cut short":
                payload = base64.b64encode(base64.b64decode(payload)[:-3]).decode("ascii")
        yield Message(
            key_partition(payment_id, SAMPLE_PARTITIONS),
            _timestamp(rng, start_ms, span_ms, index, records),
            confluent_avro(PAYMENT_KEY_AVRO, payment_id, PAYMENT_KEY_SCHEMA_ID),
            payload,
        )


def write_connect_sink_files(
    root: Path, topic: str, messages: Iterable[Message], rng: random.Random
) -> None:
    """Write a topic as a Kafka Connect storage sink leaves it: per partition, files of
    ``CONNECT_FLUSH_RECORDS`` values named ``<topic>+<partition>+<start offset>``, JSON
    lines, gzip JSON lines or Avro container files in turn; each file's modification time
    is its newest record's timestamp plus the sink's flush delay (within the sample). One
    file is delivered twice (the sink retried a flush under the other compression)."""
    by_partition: dict[int, list[Record]] = defaultdict(list)
    for record in with_offsets(messages):
        by_partition[record.partition].append(record)
    end_ms = SAMPLE_START_MS + SAMPLE_WINDOWS * SAMPLE_WINDOW_MS
    for partition, records in sorted(by_partition.items()):
        folder = root / f"partition={partition}"
        folder.mkdir(parents=True, exist_ok=True)
        for number, first in enumerate(range(0, len(records), CONNECT_FLUSH_RECORDS)):
            chunk = records[first : first + CONNECT_FLUSH_RECORDS]
            stem = f"{topic}+{partition}+{chunk[0].offset:010d}"
            kinds = (".json", ".json.gz", ".avro")
            data = {kind: _sink_file(kind, chunk, rng) for kind in kinds}
            written = [kinds[number % 3]] + ([".json"] if number == 1 else [])
            mtime = min(max(r.ts for r in chunk) + ARRIVAL_DELAY_MS, end_ms - 1)
            for kind in dict.fromkeys(written):
                path = folder / f"{stem}{kind}"
                path.write_bytes(data[kind])
                os.utime(path, ns=(mtime * 1_000_000, mtime * 1_000_000))


def _sink_file(kind: str, records: list[Record], rng: random.Random) -> bytes:
    values = [None if r.payload is None else json.loads(r.payload) for r in records]
    if kind == ".avro":
        out = io.BytesIO()
        schema = {"type": "record", "name": "PageView", "fields": [
            {"name": "user_id", "type": "long"}, {"name": "url", "type": "string"}]}  # fmt: skip
        fastavro.writer(out, fastavro.parse_schema(schema), values,
                        sync_marker=rng.randbytes(16))  # fmt: skip
        return out.getvalue()
    lines = "".join(json.dumps(v, separators=(",", ":")) + "\n" for v in values).encode()
    return gzip.compress(lines, mtime=0) if kind == ".json.gz" else lines


def with_offsets(messages: Iterable[Message]) -> Iterator[Record]:
    """Give each message the next offset of its partition, as the broker would."""
    next_offset: dict[int, int] = {}
    for message in messages:
        offset = next_offset.get(message.partition, 0)
        next_offset[message.partition] = offset + 1
        yield Record(message.partition, offset, message.ts, message.key, message.payload)


def dump_line(topic_json: str, record: Record) -> str:
    """One kcat ``-J`` line; ``topic_json`` is the topic already encoded as a JSON string."""
    key = "null" if record.key is None else _json_string(record.key)
    payload = "null" if record.payload is None else _json_string(record.payload)
    return (
        f'{{"topic":{topic_json},"partition":{record.partition},"offset":{record.offset},'
        f'"tstype":"create","ts":{record.ts},"broker":{record.partition % 3 + 1},'
        f'"headers":[],"key":{key},"payload":{payload}}}\n'
    )


def write_dump_files(
    root: Path,
    topic: str,
    records: Iterable[Record],
    rng: random.Random,
    *,
    total: int,
    files: int,
    partitions: int,
    redelivery_fraction: float,
    malformed: int = 0,
) -> None:
    """Cut ``total`` records into ``files`` overlapping dump files under ``root`` (see the
    module docstring); the first ``malformed`` redelivered copies are written truncated,
    so each such broken line has an intact twin in the previous file."""
    if total < 1:
        raise ValueError(f"no records to write for {topic}")
    files = min(files, total)
    bounds = [index * total // files for index in range(files + 1)]
    topic_json = json.dumps(topic)
    written = 0
    with _DumpFiles(root, _dump_names(topic, files, rng)) as out:
        chunk = 0
        late_left = 0
        for record in records:
            while written >= bounds[chunk + 1]:
                chunk += 1
                out.close_before(chunk)
            size = bounds[chunk + 1] - bounds[chunk]
            position = written - bounds[chunk]
            written += 1
            if position == 0:
                late_left = max(1, round(size * LATE_SHARE))
            redelivered = max(1, round(size * redelivery_fraction)) if redelivery_fraction else 0
            line = dump_line(topic_json, record)
            if chunk == files - 1:
                out.write(chunk, line, record.ts)
            elif position >= size - redelivered:
                out.write(chunk, line, record.ts)
                if malformed > chunk and position == size - redelivered:
                    line = line[: len(line) // 2] + "\n"
                out.write(chunk + 1, line, record.ts)
            elif late_left and position >= size // 2 and record.partition == chunk % partitions:
                late_left -= 1
                out.write(chunk + 1, line, record.ts)
            else:
                out.write(chunk, line, record.ts)
    if written != total:
        raise ValueError(f"expected {total} records for {topic}, got {written}")


class _DumpFiles:
    """The dump files of one topic: opened on first write, closed once no longer needed
    (at most two are open), then stamped with their arrival time."""

    def __init__(self, root: Path, names: list[str]) -> None:
        self.paths = [Path(root) / name for name in names]
        self.handles: dict[int, tuple[IO[bytes], IO[bytes]]] = {}
        self.newest_ts = [0] * len(names)

    def __enter__(self) -> _DumpFiles:
        return self

    def write(self, index: int, line: str, ts: int) -> None:
        if index not in self.handles:
            self.handles[index] = self._open(self.paths[index])
        self.handles[index][0].write(line.encode("utf-8"))
        self.newest_ts[index] = max(self.newest_ts[index], ts)

    def close_before(self, index: int) -> None:
        for done in [i for i in self.handles if i < index]:
            writer, raw = self.handles.pop(done)
            writer.close()
            raw.close()

    def __exit__(self, *_: object) -> None:
        self.close_before(len(self.paths))
        arrivals = [ts + ARRIVAL_DELAY_MS for ts in self.newest_ts]
        for index in range(1, len(arrivals) - 1, 3):  # some files land after their successor
            arrivals[index] = arrivals[index + 1] + 1_000
        for path, arrival in zip(self.paths, arrivals, strict=True):
            if path.exists():
                os.utime(path, ns=(arrival * 1_000_000, arrival * 1_000_000))

    @staticmethod
    def _open(path: Path) -> tuple[IO[bytes], IO[bytes]]:
        """(writer, underlying file); closing a GzipFile leaves its file open."""
        path.parent.mkdir(parents=True, exist_ok=True)
        raw = path.open("wb")
        if path.suffix != ".gz":
            return raw, raw
        # mtime=0 and no file name in the header keep gzip output byte-identical per seed.
        compressor = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0)
        return io.BufferedWriter(compressor, WRITE_BUFFER_BYTES), raw


def _dump_names(topic: str, files: int, rng: random.Random) -> list[str]:
    """Relative paths of the files in offset order: random names, so that sorting by path
    says nothing about offsets; every third file is gzipped."""
    names: list[str] = []
    while len(names) < files:
        index = len(names)
        folder = SUB_FOLDERS[rng.randrange(len(SUB_FOLDERS))]
        suffix = ".json.gz" if index % 3 == 1 else ".json"
        name = os.path.join(folder, f"{topic}-{rng.getrandbits(40):010x}{suffix}")
        if name not in names:
            names.append(name)
    return names


def _pick(rng: random.Random, count: int) -> int:
    """A uniform index below ``count``; cheaper than ``randrange`` in the hot loop."""
    return int(rng.random() * count)


def _timestamp(rng: random.Random, start_ms: int, span_ms: int, index: int, total: int) -> int:
    """Evenly spread over the span; occasionally a little behind (but never before start)."""
    ts = start_ms + span_ms * index // total
    if rng.random() < JITTER_SHARE:
        ts = max(start_ms, ts - rng.randrange(MAX_JITTER_MS))
    return ts


def _write_topic(
    landing: Path,
    topic: str,
    messages: list[Message],
    rng: random.Random,
    *,
    files: int,
    malformed: int = 0,
) -> None:
    write_dump_files(
        landing / topic,
        topic,
        with_offsets(messages),
        rng,
        total=len(messages),
        files=files,
        partitions=SAMPLE_PARTITIONS,
        redelivery_fraction=0.05,
        malformed=malformed,
    )


def _with_user_anomalies(
    messages: Iterable[Message], rng: random.Random, *, keys: int, partitions: int
) -> Iterator[Message]:
    """The users stream with bad and edge-case records spliced in at fixed points: a null
    key, an undecodable value (later overwritten by a good one) and a delete of a key that
    never existed."""
    broken_key = keys // 2
    specials = {
        300: (
            rng.randrange(partitions),
            None,
            '{"name":"Nobody","email":"n@example.com","tier":"free","visits":0}',
        ),
        500: (key_partition(broken_key, partitions), broken_key, '{"name":"Trunc'),
        800: (key_partition(keys + 7, partitions), keys + 7, None),
        1000: (
            key_partition(broken_key, partitions),
            broken_key,
            '{"name":"Repaired Row","email":"fixed@example.com","tier":"pro","visits":1}',
        ),
    }
    for index, message in enumerate(messages):
        yield message
        if index in specials:
            partition, key_id, payload = specials[index]
            key = None if key_id is None else f'{{"id":{key_id}}}'
            yield Message(partition, message.ts, key, payload)


def _new_order(rng: random.Random, order_id: int) -> dict[str, object]:
    return {
        "id": order_id,
        "customer_id": rng.randrange(1, 60),
        "status": "pending",
        "amount": round(rng.uniform(5, 500), 2),
    }


def _new_line(rng: random.Random, line_id: int, order_id: int) -> dict[str, object]:
    return {"id": line_id, "order_id": order_id, "sku": f"SKU-{rng.randrange(100, 999)}",
            "quantity": rng.randint(1, 5)}


def _updated_order(rng: random.Random, order: dict[str, object]) -> dict[str, object]:
    """Move the order along its lifecycle, sometimes correcting the amount."""
    status = ORDER_STATUSES.index(str(order["status"]))
    updated = {**order, "status": ORDER_STATUSES[min(status + 1, len(ORDER_STATUSES) - 1)]}
    if rng.random() < 0.3:
        updated["amount"] = round(rng.uniform(5, 500), 2)
    return updated


def pg_source(
    ts: int, snapshot: str, lsn: int, commit_lsn: int | None, tx_id: int
) -> dict[str, object]:
    """Debezium's Postgres ``source`` block; ``sequence`` is ``[last_commit_lsn, lsn]``."""
    return {
        "version": "2.7.3.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": ts,
        "snapshot": snapshot,
        "db": "shop",
        "sequence": json.dumps([None if commit_lsn is None else str(commit_lsn), str(lsn)]),
        "schema": "public",
        "table": "orders",
        "txId": tx_id,
        "lsn": lsn,
        "xmin": None,
    }


def debezium_message(
    row_id: int,
    before: dict[str, object] | None,
    after: dict[str, object] | None,
    op: str,
    source: dict[str, object],
    ts: int,
    transaction: dict[str, object] | None = None,
) -> Message:
    """A change event of row ``row_id``, in ``transaction`` (None: outside any, a snapshot)."""
    payload = {
        "before": before,
        "after": after,
        "source": source,
        "op": op,
        "ts_ms": ts,
        "transaction": transaction,
    }
    return Message(
        key_partition(row_id, SAMPLE_PARTITIONS),
        ts,
        f'{{"id":{row_id}}}',
        json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
    )


def _connector_restart(resent: list[Message], ts: int) -> Iterator[Message]:
    """Debezium re-sends events after a crash: same change events (source positions
    unchanged), newly produced, so they get new offsets and a new processing time."""
    for message in resent:
        payload = message.payload
        if payload is not None:
            event = json.loads(payload)
            event["ts_ms"] = ts
            payload = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        yield Message(message.partition, ts, message.key, payload)


def _sample_config_yaml(end_ms: int, schemas: str) -> str:
    """The demo config; every source reclocks by event time so runs are deterministic."""

    def source(name: str, key: dict[str, str], value: dict[str, str], envelope: str) -> dict:
        return {
            "name": name,
            "topic": name,
            "format": "json",
            "key": key,
            "value": value,
            "envelope": envelope,
            "reclock": "event-time",
        }

    users = source("users", UPSERT_KEY_SCHEMA, UPSERT_VALUE_SCHEMA, "upsert")
    users["owners"] = ["team:accounts"]
    users["history"] = True  # every version of every user, as an SCD type 2 table
    # The great-expectations check runs on each window's new rows (non-blocking).
    users["expectations"] = [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "id"}},
        {"type": "expect_column_values_to_be_in_set",
         "kwargs": {"column": "tier", "value_set": list(TIERS)}},
    ]

    payments = source("payments", {"id": "bigint"}, PAYMENTS_VALUE_SCHEMA, "upsert")
    payments |= {
        "key_encoding": "avro",
        "key_avro_schema": {"file": f"{schemas}/payments-key.avsc", "id": PAYMENT_KEY_SCHEMA_ID},
        "value_encoding": "avro",
        "value_avro_schema": {"subject": "payments-value", "version": 1},
        "include": ["partition", "offset"],
    }  # fmt: skip
    pageviews = source("pageviews", {}, CLICKS_VALUE_SCHEMA, "none")
    pageviews["include"] = ["partition", "offset"]

    config = {
        "lake": "lake",
        "landing": "landing",
        "window": "1m",
        "start": _iso(SAMPLE_START_MS),
        "end": _iso(end_ms),
        "schema_folder": schemas,
        "sources": [
            users,
            source("orders", {"id": "bigint"}, ORDERS_VALUE_SCHEMA, "debezium-upsert"),
            source("order_lines", {"id": "bigint"}, ORDER_LINES_VALUE_SCHEMA, "debezium-upsert"),
            source("clicks", {}, CLICKS_VALUE_SCHEMA, "none"),
            payments,
            pageviews,
        ],
        # An order and its lines change in one transaction: no window shows half of one.
        "transactions": [
            {"name": "shop", "topic": TRANSACTION_TOPIC, "sources": DATA_COLLECTIONS,
             "timeout": "2m"},
        ],
    }
    header = "# The bundled reclock demo, written by `reclock sample`.\n"
    return header + yaml.safe_dump(config, sort_keys=False, allow_unicode=True)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
