"""The config file's model: the sections, the sources, the transaction groups, the whole.

The model is the one definition of the file: it validates it, and its JSON Schema
(``config_schema``, shipped as ``pipelines/reclock.schema.json``) lets editors check and
complete it. Unknown keys are errors, so a typo never silently falls back to a default; a
key set to null (an empty YAML value) counts as absent. The model judges each field on its
own; the cross-field rules (``cdc_core.config.rules``) judge the model once it is built,
called by parsing, so the model knows nothing of them.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pyspark.sql.types import (
    StructType,
)

from cdc_core.calendar import (
    Calendar,
    duration_ms,
)
from cdc_core.config.catalog import CatalogSettings
from cdc_core.config.fields import (
    CREDENTIAL_SETTING,
    DEFAULT_LAUNCHABLE,
    DEFAULT_RETENTION,
    Columns,
    Duration,
    Expectation,
    Flag,
    Folder,
    Identifier,
    Instant,
    Place,
    Section,
    SourceFormat,
    SparkSetting,
    StartOffsets,
    Text,
    Topic,
    count_of,
    nonempty_text,
    one_of,
    owner_name,
    positive,
    schedulable,
    schema_version,
    some_columns,
    to_struct_type,
)
from cdc_core.config.problems import Problem, describe, iso, raise_all, refusal, reraise
from cdc_core.envelopes.avro_schemas import (
    LATEST,
    AvroSchema,
    AvroSchemaError,
    load_schema_file,
    load_subject,
)
from cdc_core.envelopes.columns import output_schema as envelope_output_schema
from cdc_core.frontier import OffsetFrontier
from cdc_core.schemas import reclocked_schema
from cdc_core.spark import SparkConnectConflict, named_remote
from cdc_core.storage import (
    InsecureEndpoint,
    RetryPolicy,
    S3Settings,
)
from cdc_core.vocabulary import (
    Envelope,
    Format,
    IncludeField,
    ReclockPolicy,
    RecordEncoding,
    RetirePolicy,
    SinkStore,
)


class SparkSettings(Section):
    """Optional Spark overrides; ``master=None`` keeps the local default, ``remote``
    attaches to a Spark Connect server instead (docs: guides/spark-connect.md)."""

    master: Text | None = None
    """Spark master URL, e.g. local[2]; local by default."""
    remote: Text | None = None
    """A Spark Connect server, sc://host:port (e.g. one `reclock spark-server` runs); with
    no master and no remote, the SPARK_REMOTE environment variable names one."""
    conf: dict[str, SparkSetting] = Field(default_factory=dict)
    """Spark settings, e.g. {spark.driver.memory: 4g}."""

    @model_validator(mode="after")
    def _no_credentials(self) -> SparkSettings:
        """A credential among the Spark settings is refused: Spark settings reach command
        lines, logs and the Dagster instance, so credentials go in ``storage`` or the AWS
        environment, and a Connect token in SPARK_CONNECT_AUTHENTICATE_TOKEN."""
        named = sorted(key for key in self.conf if CREDENTIAL_SETTING.search(key))
        if named:
            raise refusal(
                f"{', '.join(named)}: credentials never go in spark.conf (Spark settings "
                "can be read back from logs and the Dagster instance); give S3 keys in the "
                "storage block or the AWS environment (AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY), a Connect token in SPARK_CONNECT_AUTHENTICATE_TOKEN"
            )
        return self

    @model_validator(mode="after")
    def _one_mode(self) -> SparkSettings:
        """A remote named any of three ways (``remote``, ``conf: spark.remote``, an
        ``sc://`` master) is checked at load and carried in ``conf`` as ``spark.remote``,
        where every session builder looks; naming a classic master too is refused."""
        conf = dict(self.conf)
        if self.remote is not None:
            if conf.get("spark.remote", self.remote) != self.remote:
                raise refusal(f"remote {self.remote} and conf spark.remote "
                               f"{conf['spark.remote']} differ")  # fmt: skip
            conf["spark.remote"] = self.remote
        try:
            remote = named_remote(self.master, conf)
        except SparkConnectConflict as refused:
            raise refusal(str(refused)) from None
        if remote is not None:
            conf["spark.remote"] = remote
            object.__setattr__(self, "remote", remote)
            object.__setattr__(self, "master", None)
            object.__setattr__(self, "conf", conf)
        return self


class RetrySettings(Section):
    """How requests to an object store are retried: one policy for Spark's s3a, delta-rs,
    pyarrow and boto3 (docs: guides/object-storage.md, "Retries and the deadline")."""

    attempts: Annotated[int, BeforeValidator(count_of("attempts"))] = RetryPolicy.attempts
    """Tries per request, the first included (at least 1)."""
    base_backoff: Duration = "100ms"
    """The wait before the first retry; it doubles with each retry."""
    max_backoff: Annotated[Duration, AfterValidator(positive)] = "5s"
    """The longest wait between two tries (where the client lets it be set)."""
    request_timeout: Annotated[Duration, AfterValidator(positive)] = "20s"
    """How long one try may connect, or wait for the store's answer, before it fails."""
    deadline: Annotated[Duration, AfterValidator(positive)] = "3m"
    """The longest one request may take, every retry included: refused when the tries
    and backoffs above could take longer. A store that is down fails a request, and the
    run, once the tries are spent: within the deadline, sooner when it refuses at once."""

    @model_validator(mode="after")
    def _within_deadline(self) -> RetrySettings:
        """Settings out of range, or tries that could outlast the deadline, are refused."""
        try:
            self.policy.check()
        except ValueError as error:
            raise refusal(str(error)) from None
        return self

    @property
    def policy(self) -> RetryPolicy:
        """These settings for the storage layer."""
        return RetryPolicy(
            attempts=self.attempts,
            base_backoff_ms=duration_ms(self.base_backoff),
            max_backoff_ms=duration_ms(self.max_backoff),
            request_timeout_ms=duration_ms(self.request_timeout),
            deadline_ms=duration_ms(self.deadline),
        )


class StorageSettings(Section):
    """How ``s3://`` lakes and landing zones are reached; each setting unset here comes
    from the standard AWS environment (docs: guides/object-storage.md)."""

    endpoint: Text | None = None
    """The S3 endpoint URL (default: AWS_ENDPOINT_URL, else AWS itself); plain http only
    for a loopback endpoint, e.g. http://127.0.0.1:9000."""
    region: Text | None = None
    """The region (default: AWS_REGION, else us-east-1)."""
    access_key_id: Text | None = None
    """The access key id (default: AWS_ACCESS_KEY_ID)."""
    secret_access_key: Text | None = None
    """The secret access key (default: AWS_SECRET_ACCESS_KEY)."""
    retries: RetrySettings = RetrySettings()
    """How requests to the store are retried, and how long a request may take."""

    @model_validator(mode="after")
    def _safe(self) -> StorageSettings:
        """An endpoint that is not a URL, or plain http to another machine, is refused."""
        try:
            self.s3.check({})
        except (InsecureEndpoint, ValueError) as error:
            raise refusal(str(error)) from None
        return self

    @property
    def s3(self) -> S3Settings:
        """These settings for the storage layer (unset ones still to come from the
        environment)."""
        return S3Settings(
            endpoint=self.endpoint,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
            retries=self.retries.policy,
        )



class ReaderSettings(Section):
    """Leases of the readers of a source's tables: a live reader holds the history it
    may still read (docs: guides/readers.md)."""

    lease: Annotated[Duration, AfterValidator(positive)] = "1h"
    """How long a reader's hold lasts without a heartbeat; the CDCv2 export holds
    changes with it, renewed after every window it writes."""
    warn_after: Annotated[Duration, AfterValidator(positive)] = "1d"
    """The readers check warns when a live reader pins history older than this."""

    @property
    def lease_ms(self) -> int:
        """``lease`` in milliseconds."""
        return duration_ms(self.lease)

    @property
    def warn_after_ms(self) -> int:
        """``warn_after`` in milliseconds."""
        return duration_ms(self.warn_after)



class AvroSchemaRef(Section):
    """Where an Avro schema comes from, with no registry server: a schema file and the
    schema id records written with it carry, or a subject version in ``schema_folder``."""

    model_config = ConfigDict(title="AvroSchema")

    file: Folder | None = None
    """An .avsc file (relative: to the config file's folder); needs id."""
    id: Annotated[int, BeforeValidator(count_of("schema id"))] | None = None
    """The registry id of the file's schema: records carrying another id are errors."""
    subject: Text | None = None
    """A subject in schema_folder: <schema_folder>/<subject>/<version>.json."""
    version: Annotated[int | str, BeforeValidator(schema_version)] = LATEST
    """The subject's version: a number, or latest (the highest in the folder)."""

    def load(self, schema_folder: Path | None) -> AvroSchema:
        """The schema it names (AvroSchemaError when it cannot be read)."""
        if self.file is not None:
            return load_schema_file(self.file, self.id or 0)
        if schema_folder is None:
            raise AvroSchemaError("a subject needs schema_folder (at the top of the config)")
        return load_subject(schema_folder, self.subject or "", self.version)


Encoding = Annotated[RecordEncoding, one_of(RecordEncoding)]
_CDCV2_FORMATS: list[JsonValue] = [str(f) for f in Format if f.cdcv2]


class SourceConfig(Section):
    """One Kafka topic turned into one set of Delta tables under <lake>/<name>.

    ``key`` and ``value`` map column names to type names (``long`` normalised to
    ``bigint``), in declaration order.
    """

    # Editors judge the format/envelope pairing as ``rules.source_problems`` does.
    model_config = ConfigDict(
        json_schema_extra={
            "if": {"properties": {"format": {"enum": _CDCV2_FORMATS}}, "required": ["format"]},
            "then": {"properties": {"envelope": {"const": str(Envelope.MATERIALIZE)}}},
            "else": {"properties": {"envelope": {"not": {"const": str(Envelope.MATERIALIZE)}}}},
        }
    )

    name: Identifier
    """The source's name (an identifier): its tables live under <lake>/<name>."""
    topic: Topic
    """The Kafka topic; its dumps are read from <landing>/<topic>/."""
    format: SourceFormat = Format.JSON
    """How dump payloads are encoded: json records, or a CDCv2 stream (cdcv2-json, or
    cdcv2-avro: base64 of Confluent-framed Avro of the Materialize CDC schema), whose
    envelope is materialize."""
    key: Columns = Field(default_factory=dict)
    """Key columns (name: type), in order; needed by every envelope but none (and none for
    materialize, whose rows have no key)."""
    value: Annotated[Columns, AfterValidator(some_columns)] = Field(
        json_schema_extra={"minProperties": 1}
    )
    """Value columns (name: type), in order; the after image for the Debezium envelopes."""
    key_encoding: Encoding = RecordEncoding.JSON
    """How Kafka keys are written: json (object or scalar), text, bytes (base64 in the
    dump) or avro (Confluent wire format, base64 in the dump; needs key_avro_schema)."""
    value_encoding: Encoding = RecordEncoding.JSON
    """How Kafka values are written: json, text, bytes or avro (needs value_avro_schema)."""
    key_avro_schema: AvroSchemaRef | None = None
    """The Avro schema of the keys, for key_encoding avro."""
    value_avro_schema: AvroSchemaRef | None = None
    """The Avro schema of the values, for value_encoding avro."""
    envelope: Annotated[Envelope, one_of(Envelope)]
    """How records turn into changes."""
    include: tuple[Annotated[IncludeField, one_of(IncludeField)], ...] = ()
    """Kafka metadata of each row's (winning) record as extra columns: partition, offset,
    timestamp, key (the key as the dump holds it), headers (its Kafka headers in order,
    as a list of {key, value} with the value's bytes)."""
    reclock: Annotated[ReclockPolicy, one_of(ReclockPolicy)]
    """What binds a record to a window: its arrival, or its event time (ts)."""
    allow_offset_gaps: Flag = False
    """Accept gaps between offsets, as compacted topics and topics written by a
    transactional producer (its commit markers, its aborted transactions) have."""
    sink_stores: tuple[Annotated[SinkStore, one_of(SinkStore)], ...] = ()
    """What the Kafka Connect sink writes beside each value file (its store.kafka.keys and
    store.kafka.headers): keys, headers. A sink value file is then read only together with
    them, and waits for them as for a gap in its offsets."""
    start_offsets: StartOffsets = Field(default_factory=OffsetFrontier)
    """Partition -> first offset, for a topic that does not start at offset 0."""
    retire: Annotated[RetirePolicy, one_of(RetirePolicy)] = RetirePolicy.ARCHIVE
    """What `reclock retire` does with dumps no run will need again."""
    stall_after: Annotated[Duration, AfterValidator(positive)] = "1h"
    """How long registered offsets may wait unbound (a window's end against the
    registration of their dump) before the accounted check fails: a gap, an event time
    far ahead or an open transaction that holds a partition back is a stall, not lag."""
    expectations: tuple[Expectation, ...] = ()
    """great-expectations checks on the changes table (a non-blocking asset check)."""
    owners: tuple[Annotated[str, AfterValidator(owner_name)], ...] = ()
    """Who answers for the source's assets (shown in Dagster): e-mails or team:<name>."""
    history: Flag = False
    """Keep a `history` table (SCD type 2: every version of every key with its validity
    interval and Kafka position); upsert and debezium-upsert envelopes only."""
    retention: Annotated[Duration, AfterValidator(positive)] | None = None
    """How far back this source's tables stay exactly readable (maintenance moves its
    sinces to UTC midnight before now - retention), when it differs from the config's
    retention, which it defaults to."""

    def avro_schema(self, part: str, schema_folder: Path | None) -> AvroSchema | None:
        """The loaded Avro schema of ``part`` (key or value), None when not avro."""
        reference = self.key_avro_schema if part == "key" else self.value_avro_schema
        return None if reference is None else reference.load(schema_folder)

    @property
    def stall_after_ms(self) -> int:
        """``stall_after`` in milliseconds."""
        return duration_ms(self.stall_after)

    @property
    def key_schema(self) -> StructType:
        """The key columns as a Spark schema."""
        return to_struct_type(self.key)

    @property
    def value_schema(self) -> StructType:
        """The value columns as a Spark schema."""
        return to_struct_type(self.value)

    @property
    def reclocked_schema(self) -> StructType:
        """The columns of the ``reclocked`` shard: headers only when the source includes them."""
        return reclocked_schema(self.keeps_headers)

    @property
    def keeps_headers(self) -> bool:
        """Whether records keep their Kafka headers (the source includes them)."""
        return IncludeField.HEADERS in self.include

    @property
    def output_schema(self) -> StructType:
        """Data columns of the ``changes`` table, as the envelope defines them."""
        return envelope_output_schema(
            self.envelope, self.key_schema, self.value_schema, self.include
        )


class TransactionGroup(Section):
    """Sources written by one database's transactions, and the connector's transaction
    topic: their windows never split a transaction (docs: concepts/transactions.md)."""

    model_config = ConfigDict(title="TransactionGroup")

    name: Identifier
    """The group's name (an identifier): its bindings live under <lake>/_transactions/<name>."""
    topic: Topic
    """The connector's transaction topic (BEGIN/END records), e.g. shop.transaction."""
    sources: dict[Identifier, Annotated[str, BeforeValidator(nonempty_text)]] = Field(
        json_schema_extra={"minProperties": 1}
    )
    """Member source name -> its Debezium data_collection, e.g. {orders: inventory.orders}."""
    timeout: Annotated[Duration, AfterValidator(positive)] = "10m"
    """The transactions check fails when a transaction stays incomplete longer than this."""

    @field_validator("sources")
    @classmethod
    def _some_sources(cls, sources: dict[str, str]) -> dict[str, str]:
        if not sources:
            raise refusal("must name at least one member source")
        return sources

    @property
    def timeout_ms(self) -> int:
        """``timeout`` in milliseconds."""
        return duration_ms(self.timeout)


class Config(Section):
    """The whole configuration; paths are absolute, times are epoch milliseconds (UTC)."""

    model_config = ConfigDict(title="reclock config")

    lake: Place
    """Root of the Delta tables: a folder (relative paths: to the config file's folder)
    or an s3://bucket/prefix URL."""
    landing: Place
    """Where dumps arrive, <landing>/<topic>/**/*.json[.gz]: a folder (relative: as
    lake) or an s3://bucket/prefix URL; it must exist and be listable."""
    window: Annotated[Duration, AfterValidator(schedulable)]
    """The IntoTime window: 1m, 5m, 15m, 1h, 1d, ... (it must tile the day)."""
    start_ms: Instant = Field(alias="start")
    """First window start: an ISO-8601 UTC instant on a window boundary."""
    end_ms: Instant | None = Field(default=None, alias="end")
    """Last window end, for finite data; open-ended when absent."""
    retention: Annotated[Duration, AfterValidator(positive)] | None = None
    """How far back the tables stay exactly readable (maintenance moves the sinces to UTC
    midnight before now - retention) and Dagster keeps the windows' runs, for every
    source that names no retention of its own. Default: 30d for an open-ended config;
    every window from start for a finite one."""
    launchable: Annotated[Duration, AfterValidator(positive)] | None = None
    """How far back windows are Dagster partitions (listed, launchable and backfilled in
    the UI, each with its own figures): from the hour at or before now - launchable, never
    before the longest retention's horizon. Default: 6h for an open-ended config; every
    window the retentions keep for a finite one. At most 100,000 windows, with an hour to
    spare."""
    spark: SparkSettings = SparkSettings()
    """Optional Spark session overrides."""
    storage: StorageSettings = StorageSettings()
    """Optional: the endpoint and credentials of s3:// locations, over the AWS
    environment."""
    catalog: CatalogSettings = CatalogSettings()
    """Optional: register the tables users read in a Hive metastore or AWS Glue, by name."""
    readers: ReaderSettings = ReaderSettings()
    """Optional: reader leases (lease) and when a reader pinning history is warned about."""
    schema_folder: Folder | None = None
    """Optional: Avro schemas by subject, <schema_folder>/<subject>/<version>.json holding
    {"id": ..., "schema": "..."} as the registry serves them (relative: as lake)."""
    sources: tuple[SourceConfig, ...] = Field(json_schema_extra={"minItems": 1})
    """The topics to turn into Delta tables (at least one, with unique names)."""
    transactions: tuple[TransactionGroup, ...] = ()
    """Optional: groups of Debezium sources whose windows never split a transaction."""

    @field_validator("start_ms", "end_ms")
    @classmethod
    def _on_window_boundary(cls, ms: int | None, info: ValidationInfo) -> int | None:
        """Judged when the window is valid: ``info.data`` holds the valid earlier fields."""
        window = info.data.get("window")
        if ms is not None and window is not None and ms % duration_ms(window):
            raise refusal(f"must lie on a {window} window boundary (got {iso(ms)})")
        return ms

    @field_validator("end_ms")
    @classmethod
    def _after_start(cls, end_ms: int | None, info: ValidationInfo) -> int | None:
        """Judged when start is valid, whatever else is wrong."""
        start_ms = info.data.get("start_ms")
        if end_ms is not None and start_ms is not None and end_ms <= start_ms:
            raise refusal(f"must be after start ({iso(start_ms)})")
        return end_ms

    @property
    def retention_ms(self) -> int | None:
        """``retention`` in milliseconds: 30 days for an open-ended config without one, None
        (every window from ``start`` stays a partition) for a finite config without one."""
        if self.retention is not None:
            return duration_ms(self.retention)
        return duration_ms(DEFAULT_RETENTION) if self.end_ms is None else None

    def source_retention_ms(self, name: str) -> int | None:
        """The retention of source ``name``: its own, else the config's (``retention_ms``)."""
        return self._retention_of(self.source(name))

    def _retention_of(self, source: SourceConfig) -> int | None:
        return self.retention_ms if source.retention is None else duration_ms(source.retention)

    @property
    def launchable_ms(self) -> int | None:
        """``launchable`` in milliseconds: 6 hours for an open-ended config without one, None
        (every window the retentions keep is a partition) for a finite config without one."""
        if self.launchable is not None:
            return duration_ms(self.launchable)
        return duration_ms(DEFAULT_LAUNCHABLE) if self.end_ms is None else None

    @field_validator("sources", mode="wrap")
    @classmethod
    def _unique_names(
        cls, value: Any, handler: ValidatorFunctionWrapHandler
    ) -> tuple[SourceConfig, ...]:
        """Names are compared on the raw entries, so a duplicate is reported along with any
        other problem of the sources; at least one source is required."""
        problems = _duplicate_names(value)
        try:
            sources = handler(value)
        except ValidationError as error:
            if not problems:
                raise
            reraise(error, problems)
        if not sources:
            raise refusal(f"must be a non-empty list of sources (got {describe(value)})")
        raise_all(cls.__name__, problems)
        return sources

    @model_validator(mode="after")
    def _catalog_in_session(self, info: ValidationInfo) -> Config:
        """An embedded metastore lives beside the config file unless it names a folder;
        its Spark settings join ``spark.conf``, where every session builder and ``reclock
        spark-server --config`` look. A setting the file gives otherwise stays, for the
        catalog's rule (``catalog.catalog_problems``) to refuse."""
        base = Path((info.context or {}).get("base_dir", "."))
        catalog = self.catalog.located(base)
        object.__setattr__(self, "catalog", catalog)
        wanted = catalog.session_conf()
        if wanted:
            spark = self.spark.model_copy(update={"conf": {**wanted, **self.spark.conf}})
            object.__setattr__(self, "spark", spark)
        return self

    def transaction_group(self, source: str) -> TransactionGroup | None:
        """The transaction group ``source`` belongs to (None when it belongs to none)."""
        return next((g for g in self.transactions if source in g.sources), None)

    @property
    def window_ms(self) -> int:
        """``window`` in milliseconds."""
        return duration_ms(self.window)

    @property
    def calendar(self) -> Calendar:
        """The windows and horizons of this config: where windows are kept and launched
        from at a given moment, which have closed, and their cron schedule (made afresh at
        each call, so a copy of the config with other fields has its own)."""
        return Calendar(
            start_ms=self.start_ms,
            window_ms=self.window_ms,
            end_ms=self.end_ms,
            launchable_ms=self.launchable_ms,
            retentions_ms={source.name: self._retention_of(source) for source in self.sources},
        )

    def source(self, name: str) -> SourceConfig:
        """The source named ``name``; KeyError listing the configured names otherwise."""
        for source in self.sources:
            if source.name == name:
                return source
        known = ", ".join(s.name for s in self.sources)
        raise KeyError(f"no source named {name!r} (configured: {known})")



def _duplicate_names(entries: Any) -> list[Problem]:
    """A source name used twice, judged on the raw entries so that it is reported along
    with any other problem of the sources."""
    problems: list[Problem] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries if isinstance(entries, list) else []):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        name = name.strip() if isinstance(name, str) else ""
        if name and name in seen:
            problems.append(Problem((index, "name"), f"duplicate source name {name!r}", name))
        seen.add(name)
    return problems


@functools.cache
def config_schema() -> dict[str, Any]:
    """The JSON Schema of the config file, generated from the model (do not mutate)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **Config.model_json_schema(by_alias=True),
    }


def config_schema_json() -> str:
    """``config_schema`` as the text of ``pipelines/reclock.schema.json``."""
    return json.dumps(config_schema(), indent=2) + "\n"


