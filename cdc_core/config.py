"""The reclock configuration file (YAML) as a frozen, typed pydantic model.

The model is the one definition of the file: it validates it, and its JSON Schema
(``config_schema``, shipped as ``pipelines/reclock.schema.json``) lets editors check and
complete it. Validation reports every problem of a file at once, one ``<field path>:
<problem>`` line each (``sources[1].envelope: must be one of ...``). Unknown keys are errors,
with a "did you mean" hint, so a typo never silently falls back to a default; a key set to
null (an empty YAML value) counts as absent.

Cross-field rules are validators on the model that holds the fields they relate, so they are
judged as soon as those fields are valid, whatever else is wrong in the file.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NamedTuple, NoReturn

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cdc_core.checks import ExpectationSpec
from cdc_core.envelopes.avro_schemas import (
    LATEST,
    AvroSchema,
    AvroSchemaError,
    column_problems,
    load_schema_file,
    load_subject,
)
from cdc_core.envelopes.columns import SHARD_COLUMNS
from cdc_core.envelopes.columns import output_schema as envelope_output_schema
from cdc_core.frontier import OffsetFrontier
from cdc_core.schemas import HISTORY_COLUMNS, reclocked_schema
from cdc_core.spark import SparkConnectConflict, named_remote
from cdc_core.storage import (
    InsecureEndpoint,
    Location,
    LocationUnreachable,
    S3Settings,
    UnsafeCommits,
    UnsupportedScheme,
    files,
    is_remote,
    settings,
)
from cdc_core.vocabulary import (
    CatalogKind,
    Envelope,
    Format,
    IncludeField,
    ReclockPolicy,
    RecordEncoding,
    RetirePolicy,
    SinkStore,
)

# Column types a schema may use; ``long`` is accepted as an alias of ``bigint``.
COLUMN_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "timestamp": TimestampType(),
    "date": DateType(),
    "bytes": BinaryType(),
}
TYPE_ALIASES = {"long": "bigint"}
# The column types a CDCv2 stream's rows can hold (the Materialize CDC Avro schema's).
CDCV2_COLUMN_TYPES = ("string", "int", "bigint", "double", "boolean")

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": MS_PER_MINUTE, "h": MS_PER_HOUR, "d": MS_PER_DAY}
# Dagster's guidance: at most this many partitions per asset.
MAX_PARTITIONS = 100_000
DEFAULT_RETENTION = "30d"
# How far back an open-ended config's windows are Dagster partitions when it names no span.
DEFAULT_LAUNCHABLE = "6h"

_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d)")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kafka's own rule, "." and ".." excepted as Kafka excepts them: a topic names the folder
# <landing>/<topic>, which must not be the landing zone or its parent.
_KAFKA_TOPIC = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,249}")
_ROOT = "<config>"  # the field path of the whole file
# The envelopes whose changes are versions of keys (one row per key at a time).
HISTORY_ENVELOPES = (Envelope.UPSERT, Envelope.DEBEZIUM_UPSERT)


class ConfigProblem(NamedTuple):
    """One thing wrong with a config: the path of the field and what is wrong with it."""

    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


class ConfigError(ValueError):
    """An invalid config: every problem found, one message line each, in the model's order.

    Each line reads ``[<file>: ]<field path>: <problem>``; ``field`` is the first problem's.
    """

    def __init__(self, problems: Sequence[ConfigProblem], file: Path | None = None) -> None:
        self.problems = tuple(problems)
        self.file = file
        where = f"{file}: " if file is not None else ""
        super().__init__("\n".join(f"{where}{problem}" for problem in self.problems))

    @property
    def field(self) -> str:
        """The field named by the first problem (what a caller shows first)."""
        return self.problems[0].field


# --- validated field types -------------------------------------------------------------------


def _problem(text: str) -> PydanticCustomError:
    """A validation error whose message is ``text``, verbatim."""
    return PydanticCustomError("reclock", "{problem}", {"problem": text})


# A problem a validator found: its location (relative to the validated value), message, input.
Located = tuple[tuple[str | int, ...], str, Any]


def _details(problems: Sequence[Located]) -> list[InitErrorDetails]:
    return [
        InitErrorDetails(type=_problem(text), loc=loc, input=value)
        for loc, text, value in problems
    ]


def _raise_all(title: str, problems: Sequence[Located]) -> None:
    """Raise every problem at once (nothing when there is none)."""
    if problems:
        raise ValidationError.from_exception_data(title, _details(problems))


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _problem(f"must be a non-empty string (got {_describe(value)})")
    return value.strip()


def _matching(pattern: re.Pattern[str], problem: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise _problem(problem.format(text=text))
        return text

    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _problem(f"must be true or false (got {_describe(value)})")
    return value


def _count(what: str) -> Callable[[Any], int]:
    """An integer >= 0; digit strings count too, as YAML mapping keys may be quoted."""

    def check(value: Any) -> int:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _problem(f"{what} must be a non-negative integer (got {_describe(value)})")
        return value

    return check


def _one_of(vocabulary: type[StrEnum]) -> BeforeValidator:
    names = ", ".join(vocabulary)

    def check(value: Any) -> StrEnum:
        try:
            return vocabulary(value)
        except ValueError:
            raise _problem(f"must be one of {names} (got {value!r})") from None

    return BeforeValidator(check)


def _column_name(value: Any) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise _problem(f"column name must be an identifier (got {value!r})")
    if value in SHARD_COLUMNS:
        raise _problem(f"column name {value!r} is reserved for shard columns")
    return value


def _column_type(value: Any) -> str:
    kind = TYPE_ALIASES.get(value, value) if isinstance(value, str) else value
    if kind not in COLUMN_TYPES:
        names = ", ".join([*COLUMN_TYPES, *TYPE_ALIASES])
        raise _problem(f"type must be one of {names} (got {value!r})")
    return kind


def _some_columns(columns: dict[str, str]) -> dict[str, str]:
    if not columns:
        raise _problem("must declare at least one column")
    return columns


_OWNER = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+|team:[A-Za-z0-9_-]+")


def _owner(value: str) -> str:
    if not _OWNER.fullmatch(value):
        raise _problem(f"must be an e-mail address or team:<name> (got {value!r})")
    return value


def _duration(value: Any) -> str:
    if not isinstance(value, str) or not _DURATION.fullmatch(value.strip()):
        raise _problem(f"must be a duration such as 1m, 5m, 1h or 1d (got {value!r})")
    return value.strip()


def duration_ms(text: str) -> int:
    """Milliseconds of a duration such as ``90s`` or ``5m``; ValueError when it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r}")
    return int(match[1]) * DURATION_UNITS_MS[match[2]]


def _schedulable(window: str) -> str:
    """Windows tile the day from UTC midnight and are ticked by a cron schedule."""
    window_ms = duration_ms(window)
    if window_ms == 0 or MS_PER_DAY % window_ms:
        raise _problem(f"must tile the day evenly, so windows align to midnight (got {window!r})")
    try:
        window_cron(window_ms)
    except ValueError as error:
        raise _problem(f"{error} (got {window!r})") from None
    return window


def _instant_ms(value: Any) -> int:
    """An ISO-8601 instant with an explicit UTC offset, as epoch milliseconds. YAML already
    turns unquoted timestamps into datetimes; strings are parsed here."""
    moment = value if isinstance(value, datetime) else None
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
    if moment is None:
        raise _problem(
            f"must be an ISO-8601 instant such as 2026-01-01T00:00:00Z (got {value!r})"
        )
    if moment.utcoffset() is None:
        raise _problem(f"must carry a UTC offset, e.g. a trailing Z (got {value!r})")
    return int(moment.astimezone(UTC).timestamp() * 1000)


def _absolute(value: Any, info: ValidationInfo) -> Path:
    """Relative paths resolve against the ``base_dir`` of the validation context."""
    path = Path(_text(value)).expanduser()
    if path.is_absolute():
        return path
    if not info.context or "base_dir" not in info.context:
        raise RuntimeError("validate a Config with context={'base_dir': <config folder>}")
    return (Path(info.context["base_dir"]) / path).resolve()


def _place(value: Any, info: ValidationInfo) -> Path | Location:
    """A local folder as an absolute Path (relative: to the ``base_dir`` of the validation
    context), or an object-store URL as a Location; a URL scheme reclock cannot reach is
    refused here, never read as a folder name."""
    text = _text(value)
    if not info.context or "base_dir" not in info.context:
        raise RuntimeError("validate a Config with context={'base_dir': <config folder>}")
    try:
        place = Location.parse(text, Path(info.context["base_dir"]))
    except UnsupportedScheme as error:
        raise _problem(str(error)) from None
    except ValueError as error:
        raise _problem(str(error)) from None
    return Path(place) if place.is_local else place


def _spark_setting(value: Any) -> str:
    """Spark takes settings as strings; YAML booleans are spelled the way Spark expects."""
    if isinstance(value, Mapping | list) or value is None:
        raise _problem(f"must be a scalar (got {_describe(value)})")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _frontier(value: Any) -> OffsetFrontier:
    return OffsetFrontier(_OFFSETS.validate_python(value))


def _expectation(value: Any) -> ExpectationSpec:
    entry = _Expectation.model_validate(value)
    return ExpectationSpec(type=entry.type, kwargs=entry.kwargs)


def _expectation_type(kind: str) -> str:
    if not kind.startswith("expect_"):
        raise _problem(f"must name an expectation (expect_...), got {kind!r}")
    return kind


Text = Annotated[str, BeforeValidator(_text), WithJsonSchema({"type": "string", "minLength": 1})]
Identifier = Annotated[
    str,
    BeforeValidator(_text),
    AfterValidator(_matching(_IDENTIFIER, "must be an identifier (got {text!r})")),
    WithJsonSchema({"type": "string", "pattern": f"^{_IDENTIFIER.pattern}$"}),
]
Topic = Annotated[
    str,
    BeforeValidator(_text),
    AfterValidator(
        _matching(_KAFKA_TOPIC, "is not a Kafka topic name (letters, digits, . _ -, "
                                "but not . or ..): {text!r}")  # fmt: skip
    ),
    WithJsonSchema({"type": "string", "pattern": f"^{_KAFKA_TOPIC.pattern}$"}),
]
Flag = Annotated[bool, BeforeValidator(_flag)]
SourceFormat = Annotated[Format, _one_of(Format), WithJsonSchema({"enum": list(Format)})]
Folder = Annotated[
    Path, BeforeValidator(_absolute), WithJsonSchema({"type": "string", "minLength": 1})
]
Place = Annotated[
    Path | Location, BeforeValidator(_place), WithJsonSchema({"type": "string", "minLength": 1})
]
Duration = Annotated[
    str,
    BeforeValidator(_duration),
    WithJsonSchema({"type": "string", "pattern": rf"^\s*{_DURATION.pattern}\s*$"}),
]
Instant = Annotated[
    int, BeforeValidator(_instant_ms), WithJsonSchema({"type": "string", "format": "date-time"})
]
ColumnName = Annotated[str, BeforeValidator(_column_name)]
ColumnType = Annotated[str, BeforeValidator(_column_type)]
Columns = Annotated[
    dict[ColumnName, ColumnType],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {
                "pattern": f"^{_IDENTIFIER.pattern}$",
                "not": {"enum": list(SHARD_COLUMNS)},
            },
            "additionalProperties": {"enum": [*COLUMN_TYPES, *TYPE_ALIASES]},
        }
    ),
]
SparkSetting = Annotated[
    str, BeforeValidator(_spark_setting), WithJsonSchema({"type": ["string", "number", "boolean"]})
]
Partition = Annotated[int, BeforeValidator(_count("partition"))]
Offset = Annotated[
    int, BeforeValidator(_count("offset")), WithJsonSchema({"type": "integer", "minimum": 0})
]
_OFFSETS = TypeAdapter(dict[Partition, Offset])
StartOffsets = Annotated[
    OffsetFrontier,
    PlainValidator(_frontier),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": "^[0-9]+$"},
            "additionalProperties": {"type": "integer", "minimum": 0},
        }
    ),
]


# --- the model -------------------------------------------------------------------------------


class _Section(BaseModel):
    """A mapping of the file: frozen, unknown keys refused, fields documented in the schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """An empty YAML value is null: the key's default applies, or it is reported missing."""
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


class _Expectation(_Section):
    """One great-expectations expectation, run on each window's changes by an asset check."""

    model_config = ConfigDict(title="Expectation")

    type: Annotated[str, BeforeValidator(_text), AfterValidator(_expectation_type)]
    """The expectation, in snake case: expect_column_values_to_not_be_null, ..."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Its arguments, e.g. {column: id}."""


Expectation = Annotated[
    ExpectationSpec, PlainValidator(_expectation), WithJsonSchema(_Expectation.model_json_schema())
]


# The Spark settings that hold credentials: Spark's own ``spark.redaction.regex`` default.
CREDENTIAL_SETTING = re.compile(r"(?i)secret|password|token|access[.]?key")


class SparkSettings(_Section):
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
            raise _problem(
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
                raise _problem(f"remote {self.remote} and conf spark.remote "
                               f"{conf['spark.remote']} differ")  # fmt: skip
            conf["spark.remote"] = self.remote
        try:
            remote = named_remote(self.master, conf)
        except SparkConnectConflict as refused:
            raise _problem(str(refused)) from None
        if remote is not None:
            conf["spark.remote"] = remote
            object.__setattr__(self, "remote", remote)
            object.__setattr__(self, "master", None)
            object.__setattr__(self, "conf", conf)
        return self


class StorageSettings(_Section):
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

    @model_validator(mode="after")
    def _safe(self) -> StorageSettings:
        """An endpoint that is not a URL, or plain http to another machine, is refused."""
        try:
            self.s3.check({})
        except (InsecureEndpoint, ValueError) as error:
            raise _problem(str(error)) from None
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
        )


# A catalog reclock cannot register in, and why: asked for, it is refused at load.
UNITY_REFUSED = (
    "unity is not supported: reclock registers tables only in catalogs it is tested "
    "against, and no Unity Catalog server (io.unitycatalog:unitycatalog-server) is available "
    "to test against; use hive (a Hive metastore, which Unity Catalog can federate) or glue"
)
TABLE_NAME_FIELDS = ("{source}", "{table}")
# Where an embedded Hive metastore keeps its Derby database and warehouse folder, relative
# to the config file's folder (the deployment's) when the config names no folder.
METASTORE_FOLDER = "metastore"
# The Spark setting that gives a session a Hive metastore as its catalog (static: a
# session gets it when it starts).
CATALOG_IMPLEMENTATION = "spark.sql.catalogImplementation"


def _catalog_kind(value: Any) -> CatalogKind:
    if value == "unity":
        raise _problem(UNITY_REFUSED)
    try:
        return CatalogKind(value)
    except ValueError:
        names = ", ".join(CatalogKind)
        raise _problem(f"must be one of {names} (got {value!r})") from None


def _table_names(rule: str) -> str:
    """A naming rule holds ``{source}`` and ``{table}`` once each, and names an identifier."""
    missing = [field for field in TABLE_NAME_FIELDS if rule.count(field) != 1]
    if missing:
        raise _problem(f"must hold {' and '.join(missing)} once (got {rule!r})")
    example = rule.replace("{source}", "s").replace("{table}", "t")
    if not _IDENTIFIER.fullmatch(example):
        raise _problem(
            f"must name identifiers: letters, digits and _ around {{source}} and {{table}} "
            f"(got {rule!r})"
        )
    return rule


def _thrift_uri(text: str) -> str:
    if not re.fullmatch(r"thrift://[^/\s:]+:\d+", text):
        raise _problem(f"must be a thrift://host:port URL (got {text!r})")
    return text


class CatalogSettings(_Section):
    """Where the tables users read are registered by name, beside their paths: a Hive
    metastore or the AWS Glue Data Catalog (docs: guides/catalog.md). Off by default."""

    kind: Annotated[
        CatalogKind, BeforeValidator(_catalog_kind), WithJsonSchema({"enum": list(CatalogKind)})
    ] = CatalogKind.NONE
    """none (paths only), hive (Spark's session catalog on a Hive metastore) or glue (the
    AWS Glue Data Catalog); unity is refused."""
    database: Identifier = "reclock"
    """The one database (schema) holding every source's tables; deployments sharing a
    metastore each name their own."""
    table_names: Annotated[str, BeforeValidator(_text), AfterValidator(_table_names)] = (
        "{source}_{table}"
    )
    """How a table is named in the database, from {source} and {table} (state, changes,
    errors, history); e.g. users_state."""
    metastore_uri: Annotated[str, BeforeValidator(_text), AfterValidator(_thrift_uri)] | None = (
        None
    )
    """hive: an external metastore server, thrift://host:port; without one, an embedded
    metastore (Derby) under folder."""
    folder: Folder | None = None
    """hive without metastore_uri: the embedded metastore's folder (relative: to the
    config file's folder; default: metastore beside the config file)."""
    region: Text | None = None
    """glue: the region (default: the storage block's, else AWS_REGION, else us-east-1)."""
    endpoint: Text | None = None
    """glue: the Glue endpoint URL (default: AWS_ENDPOINT_URL_GLUE, AWS_ENDPOINT_URL, else
    AWS itself); plain http only for a loopback endpoint."""

    @model_validator(mode="after")
    def _keys_of_kind(self) -> CatalogSettings:
        """A key of another kind of catalog is refused by name, never ignored."""
        own = {
            CatalogKind.NONE: set(),
            CatalogKind.HIVE: {"metastore_uri", "folder"},
            CatalogKind.GLUE: {"region", "endpoint"},
        }[self.kind]
        foreign = ("metastore_uri", "folder", "region", "endpoint")
        problems: list[Located] = [
            ((key,), f"is not a setting of kind {self.kind}", getattr(self, key))
            for key in foreign
            if key in self.model_fields_set and key not in own
        ]
        both = self.metastore_uri is not None and "folder" in self.model_fields_set
        if self.kind is CatalogKind.HIVE and both:
            problems.append((("folder",), "is for an embedded metastore: drop it or "
                             "metastore_uri", str(self.folder)))  # fmt: skip
        if self.endpoint is not None:
            try:
                S3Settings(endpoint=self.endpoint).check({})
            except (InsecureEndpoint, ValueError) as error:
                problems.append((("endpoint",), str(error), self.endpoint))
        _raise_all(type(self).__name__, problems)
        return self

    def table_name(self, source: str, table: str) -> str:
        """The name of ``source``'s ``table`` in the database, lower case (as metastores
        keep names)."""
        return self.table_names.format(source=source, table=table).lower()

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings a session needs to register in this catalog: a Hive
        metastore as its session catalog (embedded Derby under ``folder``, or the server at
        ``metastore_uri``); none for other kinds, which Spark never reaches."""
        if self.kind is not CatalogKind.HIVE:
            return {}
        conf = {CATALOG_IMPLEMENTATION: "hive"}
        if self.metastore_uri is not None:
            return conf | {"spark.hadoop.hive.metastore.uris": self.metastore_uri}
        folder = self.folder or Path(METASTORE_FOLDER)
        return conf | {
            "spark.sql.warehouse.dir": str(folder / "warehouse"),
            "spark.hadoop.javax.jdo.option.ConnectionURL": (
                f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
            ),
        }


def _positive(duration: str) -> str:
    if duration_ms(duration) <= 0:
        raise _problem(f"must be longer than zero (got {duration!r})")
    return duration


class ReaderSettings(_Section):
    """Leases of the readers of a source's tables: a live reader holds the history it
    may still read (docs: guides/readers.md)."""

    lease: Annotated[Duration, AfterValidator(_positive)] = "1h"
    """How long a reader's hold lasts without a heartbeat; the CDCv2 export holds
    changes with it, renewed after every window it writes."""
    warn_after: Annotated[Duration, AfterValidator(_positive)] = "1d"
    """The readers check warns when a live reader pins history older than this."""

    @property
    def lease_ms(self) -> int:
        """``lease`` in milliseconds."""
        return duration_ms(self.lease)

    @property
    def warn_after_ms(self) -> int:
        """``warn_after`` in milliseconds."""
        return duration_ms(self.warn_after)


def _version(value: Any) -> int | str:
    if value == LATEST or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise _problem(f"must be a version number (1, 2, ...) or latest (got {value!r})")


class AvroSchemaRef(_Section):
    """Where an Avro schema comes from, with no registry server: a schema file and the
    schema id records written with it carry, or a subject version in ``schema_folder``."""

    model_config = ConfigDict(title="AvroSchema")

    file: Folder | None = None
    """An .avsc file (relative: to the config file's folder); needs id."""
    id: Annotated[int, BeforeValidator(_count("schema id"))] | None = None
    """The registry id of the file's schema: records carrying another id are errors."""
    subject: Text | None = None
    """A subject in schema_folder: <schema_folder>/<subject>/<version>.json."""
    version: Annotated[int | str, BeforeValidator(_version)] = LATEST
    """The subject's version: a number, or latest (the highest in the folder)."""

    @model_validator(mode="after")
    def _one_source(self) -> AvroSchemaRef:
        problems: list[Located] = []
        if (self.file is None) == (self.subject is None):
            problems.append(((), "give either file (with id) or subject (with version)", None))
        elif self.file is not None and self.id is None:
            problems.append((("id",), "a schema file needs the schema id its records carry", None))
        elif self.subject is not None and self.id is not None:
            problems.append((("id",), "a subject's version file holds its id already", self.id))
        _raise_all(type(self).__name__, problems)
        return self

    def load(self, schema_folder: Path | None) -> AvroSchema:
        """The schema it names (AvroSchemaError when it cannot be read)."""
        if self.file is not None:
            return load_schema_file(self.file, self.id or 0)
        if schema_folder is None:
            raise AvroSchemaError("a subject needs schema_folder (at the top of the config)")
        return load_subject(schema_folder, self.subject or "", self.version)


Encoding = Annotated[RecordEncoding, _one_of(RecordEncoding)]
_CDCV2_FORMATS = [str(f) for f in Format if f.cdcv2]


class SourceConfig(_Section):
    """One Kafka topic turned into one set of Delta tables under <lake>/<name>.

    ``key`` and ``value`` map column names to type names (``long`` normalised to
    ``bigint``), in declaration order.
    """

    # Editors judge the format/envelope pairing as ``_envelope_rules`` does.
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
    value: Annotated[Columns, AfterValidator(_some_columns)] = Field(
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
    envelope: Annotated[Envelope, _one_of(Envelope)]
    """How records turn into changes."""
    include: tuple[Annotated[IncludeField, _one_of(IncludeField)], ...] = ()
    """Kafka metadata of each row's (winning) record as extra columns: partition, offset,
    timestamp, key (the key as the dump holds it), headers (its Kafka headers in order,
    as a list of {key, value} with the value's bytes)."""
    reclock: Annotated[ReclockPolicy, _one_of(ReclockPolicy)]
    """What binds a record to a window: its arrival, or its event time (ts)."""
    allow_offset_gaps: Flag = False
    """Accept gaps between offsets, as compacted topics and topics written by a
    transactional producer (its commit markers, its aborted transactions) have."""
    sink_stores: tuple[Annotated[SinkStore, _one_of(SinkStore)], ...] = ()
    """What the Kafka Connect sink writes beside each value file (its store.kafka.keys and
    store.kafka.headers): keys, headers. A sink value file is then read only together with
    them, and waits for them as for a gap in its offsets."""
    start_offsets: StartOffsets = Field(default_factory=OffsetFrontier)
    """Partition -> first offset, for a topic that does not start at offset 0."""
    retire: Annotated[RetirePolicy, _one_of(RetirePolicy)] = RetirePolicy.ARCHIVE
    """What `reclock retire` does with dumps no run will need again."""
    stall_after: Annotated[Duration, AfterValidator(_positive)] = "1h"
    """How long registered offsets may wait unbound (a window's end against the
    registration of their dump) before the accounted check fails: a gap, an event time
    far ahead or an open transaction that holds a partition back is a stall, not lag."""
    expectations: tuple[Expectation, ...] = ()
    """great-expectations checks on the changes table (a non-blocking asset check)."""
    owners: tuple[Annotated[str, AfterValidator(_owner)], ...] = ()
    """Who answers for the source's assets (shown in Dagster): e-mails or team:<name>."""
    history: Flag = False
    """Keep a `history` table (SCD type 2: every version of every key with its validity
    interval and Kafka position); upsert and debezium-upsert envelopes only."""
    retention: Annotated[Duration, AfterValidator(_positive)] | None = None
    """How far back this source's tables stay exactly readable (maintenance moves its
    sinces to UTC midnight before now - retention), when it differs from the config's
    retention, which it defaults to."""

    @model_validator(mode="after")
    def _envelope_rules(self) -> SourceConfig:
        """Rules tying the envelope to the key and value columns."""
        problems: list[Located] = []
        if self.format.cdcv2 != (self.envelope is Envelope.MATERIALIZE):
            problems.append(
                (
                    ("envelope",),
                    f"format {self.format} needs envelope materialize"
                    if self.format.cdcv2
                    else f"envelope materialize reads CDCv2 streams: format must be "
                    f"{Format.CDCV2_JSON} or {Format.CDCV2_AVRO} (got {self.format})",
                    str(self.envelope),
                )
            )
        if self.envelope is Envelope.MATERIALIZE:
            if self.key:
                problems.append(
                    (("key",), "a CDCv2 stream has no key: its rows are its data", self.key)
                )
            problems += [
                (("value", name), f"type {kind} cannot be carried by a CDCv2 stream "
                 f"(supported: {', '.join(CDCV2_COLUMN_TYPES)})", kind)
                for name, kind in self.value.items()
                if kind not in CDCV2_COLUMN_TYPES
            ]
        problems += self._encoding_problems()
        problems += self._include_problems()
        if self.envelope.keyed and not self.key:
            problems.append(
                (("key",), f"envelope {self.envelope} needs at least one key column", self.key)
            )
        for column, kind in self.key.items():
            if not self.envelope.after_image:
                if column in self.value:
                    problems.append(
                        (
                            ("value", column),
                            f"clashes with key column {column!r}: "
                            "the output holds key and value columns",
                            self.value[column],
                        )
                    )
            elif column not in self.value:
                problems.append(
                    (
                        ("key", column),
                        "key columns must be among the value (after-image) columns of a "
                        "Debezium envelope",
                        kind,
                    )
                )
            elif self.value[column] != kind:
                problems.append(
                    (
                        ("key", column),
                        f"type {kind} differs from the after-image column's {self.value[column]}",
                        kind,
                    )
                )
        problems += self._history_problems()
        _raise_all(type(self).__name__, problems)
        return self

    def _encoding_problems(self) -> list[Located]:
        """Each encoding must be able to fill the columns it decodes into."""
        problems: list[Located] = []
        parts = (
            ("key", self.key_encoding, self.key_avro_schema, self.key),
            ("value", self.value_encoding, self.value_avro_schema, self.value),
        )
        for part, encoding, avro, columns in parts:
            field = f"{part}_encoding"
            if self.format.cdcv2 and encoding is not RecordEncoding.JSON:
                problem = f"format {self.format} decodes its own values"
                problems.append(((field,), problem, encoding))
            elif part == "key" and not self.key and encoding is not RecordEncoding.JSON:
                problems.append(((field,), "there are no key columns to decode", encoding))
            elif avro is None and encoding is RecordEncoding.AVRO:
                problems.append(((f"{part}_avro_schema",), f"{field} avro needs it", None))
            elif avro is not None and encoding is not RecordEncoding.AVRO:
                problems.append(
                    ((f"{part}_avro_schema",), f"is only for {field} avro (got {encoding})", None)
                )
            kind = encoding.single_column
            if kind is None or not columns:
                continue
            if part == "value" and self.envelope.after_image:
                problems.append(
                    ((field,), f"envelope {self.envelope} needs json or avro values", encoding)
                )
            elif list(columns.values()) != [kind]:
                problems.append(
                    ((field,), f"{encoding} fills exactly one {part} column, of type {kind} "
                     f"(got {', '.join(f'{n}: {t}' for n, t in columns.items())})", encoding)
                )
        return problems

    def _include_problems(self) -> list[Located]:
        """Metadata columns must be new names, and mean something for the envelope."""
        problems: list[Located] = []
        refused = {
            Envelope.DEBEZIUM: set(IncludeField),  # rows come from before and after images
            Envelope.MATERIALIZE: set(IncludeField),  # rows come from a stream's updates
            # As in Materialize: the after image holds the key, and headers are refused.
            Envelope.DEBEZIUM_UPSERT: {IncludeField.KEY, IncludeField.HEADERS},
        }.get(self.envelope, set())
        seen: set[IncludeField] = set()
        for index, field in enumerate(self.include):
            if field in refused:
                problem = f"envelope {self.envelope} cannot include {field}"
            elif field in seen:
                problem = f"{field} is included twice"
            elif field in self.key or field in self.value:
                problem = f"column {field!r} is already a key or value column"
            else:
                seen.add(field)
                continue
            problems.append((("include", index), problem, str(field)))
        return problems

    def avro_schema(self, part: str, schema_folder: Path | None) -> AvroSchema | None:
        """The loaded Avro schema of ``part`` (key or value), None when not avro."""
        reference = self.key_avro_schema if part == "key" else self.value_avro_schema
        return None if reference is None else reference.load(schema_folder)

    def _history_problems(self) -> list[Located]:
        """A history needs versions of keys, and its own columns beside the output's."""
        if not self.history:
            return []
        if self.envelope not in HISTORY_ENVELOPES:
            why = (
                "its changes only ever insert, so `changes` already is its history"
                if self.envelope is Envelope.NONE
                else "its changes keep duplicates and are not one row per key"
            )
            return [
                (
                    ("history",),
                    f"needs envelope upsert or debezium-upsert (got {self.envelope}: {why})",
                    self.history,
                )
            ]
        clashes = [name for name in HISTORY_COLUMNS.names if name in (*self.key, *self.value)]
        problems: list[Located] = [
            (
                ("value" if column in self.value else "key", column),
                "is a column of the history table; rename it or set history: false",
                column,
            )
            for column in clashes
        ]
        problems += [
            (
                ("include", index),
                f"{field} is a column of the history table (the position of the record that "
                "wrote each version); leave it out or set history: false",
                str(field),
            )
            for index, field in enumerate(self.include)
            if field in HISTORY_COLUMNS.names
        ]
        return problems

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


class TransactionGroup(_Section):
    """Sources written by one database's transactions, and the connector's transaction
    topic: their windows never split a transaction (docs: concepts/transactions.md)."""

    model_config = ConfigDict(title="TransactionGroup")

    name: Identifier
    """The group's name (an identifier): its bindings live under <lake>/_transactions/<name>."""
    topic: Topic
    """The connector's transaction topic (BEGIN/END records), e.g. shop.transaction."""
    sources: dict[Identifier, Annotated[str, BeforeValidator(_text)]] = Field(
        json_schema_extra={"minProperties": 1}
    )
    """Member source name -> its Debezium data_collection, e.g. {orders: inventory.orders}."""
    timeout: Annotated[Duration, AfterValidator(_positive)] = "10m"
    """The transactions check fails when a transaction stays incomplete longer than this."""

    @field_validator("sources")
    @classmethod
    def _some_sources(cls, sources: dict[str, str]) -> dict[str, str]:
        if not sources:
            raise _problem("must name at least one member source")
        return sources

    @property
    def timeout_ms(self) -> int:
        """``timeout`` in milliseconds."""
        return duration_ms(self.timeout)


class Config(_Section):
    """The whole configuration; paths are absolute, times are epoch milliseconds (UTC)."""

    model_config = ConfigDict(title="reclock config")

    lake: Place
    """Root of the Delta tables: a folder (relative paths: to the config file's folder)
    or an s3://bucket/prefix URL."""
    landing: Place
    """Where dumps arrive, <landing>/<topic>/**/*.json[.gz]: a folder (relative: as
    lake) or an s3://bucket/prefix URL; it must exist and be listable."""
    window: Annotated[Duration, AfterValidator(_schedulable)]
    """The IntoTime window: 1m, 5m, 15m, 1h, 1d, ... (it must tile the day)."""
    start_ms: Instant = Field(alias="start")
    """First window start: an ISO-8601 UTC instant on a window boundary."""
    end_ms: Instant | None = Field(default=None, alias="end")
    """Last window end, for finite data; open-ended when absent."""
    retention: Annotated[Duration, AfterValidator(_positive)] | None = None
    """How far back the tables stay exactly readable (maintenance moves the sinces to UTC
    midnight before now - retention) and Dagster keeps the windows' runs, for every
    source that names no retention of its own. Default: 30d for an open-ended config;
    every window from start for a finite one."""
    launchable: Annotated[Duration, AfterValidator(_positive)] | None = None
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
            raise _problem(f"must lie on a {window} window boundary (got {_iso(ms)})")
        return ms

    @field_validator("end_ms")
    @classmethod
    def _after_start(cls, end_ms: int | None, info: ValidationInfo) -> int | None:
        """Judged when start is valid, whatever else is wrong."""
        start_ms = info.data.get("start_ms")
        if end_ms is not None and start_ms is not None and end_ms <= start_ms:
            raise _problem(f"must be after start ({_iso(start_ms)})")
        return end_ms

    @model_validator(mode="after")
    def _partitions_within_guidance(self) -> Config:
        """Dagster's guidance: at most 100,000 partitions per asset, at any age. With a
        launchable span the set spans it and the hour its start is floored by; without one
        (a finite config), the longest retention and the day its horizon is floored by, or
        every window from start to end."""
        window_ms = self.window_ms
        guidance = f"Dagster's guidance of {MAX_PARTITIONS:,} partitions per asset"
        finite = None if self.end_ms is None else (self.end_ms - self.start_ms) // window_ms
        problems: list[Located] = []
        retentions = {("retention",): self.retention} if self.retention is not None else {}
        for index, source in enumerate(self.sources):
            if source.retention is not None:
                retentions[("sources", index, "retention")] = source.retention
        kept_by_all = self.retention is not None or all(s.retention for s in self.sources)
        if self.launchable_ms is not None:
            step = self.launch_step_ms
            windows = (self.launchable_ms + step) // window_ms
            if finite is not None:  # a finite config holds no more than its windows
                windows = min(windows, finite)
            if windows > MAX_PARTITIONS:
                longest = (MAX_PARTITIONS * window_ms - step) // MS_PER_DAY
                problems.append((("launchable",), (
                    f"lists up to {windows:,} windows of {self.window} (the span and an "
                    f"hour), more than {guidance}: at most {longest}d for {self.window} "
                    f"windows (got {self.launchable!r})"
                ), self.launchable))
        elif retentions and kept_by_all and finite is not None:
            longest = (MAX_PARTITIONS * window_ms - MS_PER_DAY) // MS_PER_DAY
            where, retention = max(retentions.items(), key=lambda item: duration_ms(item[1]))
            windows = min((duration_ms(retention) + MS_PER_DAY) // window_ms, finite)
            if windows > MAX_PARTITIONS:
                problems.append((where, (
                    f"keeps up to {windows:,} windows of {self.window} (the retention and a "
                    f"day), more than {guidance}: at most {longest}d for {self.window} "
                    f"windows, or a launchable span (got {retention!r})"
                ), retention))
        elif finite is not None and finite > MAX_PARTITIONS:
            longest = (MAX_PARTITIONS * window_ms - MS_PER_HOUR) // MS_PER_DAY
            problems.append((("end",), (
                f"{finite:,} windows of {self.window} lie between start and end, more "
                f"than {guidance}: set a launchable span (at most {longest}d) or a wider "
                "window"
            ), _iso(self.end_ms)))
        _raise_all(type(self).__name__, problems)
        return self

    @property
    def retention_ms(self) -> int | None:
        """``retention`` in milliseconds: 30 days for an open-ended config without one, None
        (every window from ``start`` stays a partition) for a finite config without one."""
        if self.retention is not None:
            return duration_ms(self.retention)
        return duration_ms(DEFAULT_RETENTION) if self.end_ms is None else None

    def source_retention_ms(self, name: str) -> int | None:
        """The retention of source ``name``: its own, else the config's (``retention_ms``)."""
        own = self.source(name).retention
        return duration_ms(own) if own is not None else self.retention_ms

    def source_horizon(self, name: str, now_ms: int | None = None) -> int:
        """Where the windows of source ``name`` that its tables still read back exactly
        begin at ``now_ms``: its since's place after maintenance. See
        ``retention_start``."""
        return self._horizon(self.source_retention_ms(name), now_ms)

    def retention_start(self, now_ms: int | None = None) -> int:
        """Where the windows some source still keeps begin at ``now_ms``: the earliest
        source horizon (Dagster keeps the runs of the windows from there on).

        A horizon is ``start``, or the UTC midnight at or before ``now - retention`` when
        that is later; flooring to midnight moves it once a day. A finite config whose end
        lies before the horizon keeps its last window.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return min(self.source_horizon(source.name, now) for source in self.sources)

    @property
    def launchable_ms(self) -> int | None:
        """``launchable`` in milliseconds: 6 hours for an open-ended config without one, None
        (every window the retentions keep is a partition) for a finite config without one."""
        if self.launchable is not None:
            return duration_ms(self.launchable)
        return duration_ms(DEFAULT_LAUNCHABLE) if self.end_ms is None else None

    @property
    def launch_step_ms(self) -> int:
        """The steps the partitions' start moves in: the hour, or the window when that is
        longer (both tile the day, so every step starts a window)."""
        return math.lcm(self.window_ms, MS_PER_HOUR)

    def first_window_start(self, now_ms: int | None = None) -> int:
        """Where Dagster's partitions begin at ``now_ms``: the hour at or before ``now -
        launchable`` (with a launchable span), never before ``retention_start``, so the
        UI lists and launches about the same number of windows at any age.

        Flooring to the hour moves the start, and the partition status Dagster caches for
        it, once an hour rather than every window. A finite config whose end lies before
        it keeps its last window, so the set is never empty.
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        first = self.retention_start(now)
        if self.launchable_ms is None:
            return first
        return max(first, self._floored_start(now - self.launchable_ms, self.launch_step_ms))

    def _horizon(self, retention: int | None, now_ms: int | None) -> int:
        if retention is None:
            return self.start_ms
        now = int(time.time() * 1000) if now_ms is None else now_ms
        return self._floored_start(now - retention, MS_PER_DAY)

    def _floored_start(self, moment_ms: int, step_ms: int) -> int:
        """``moment_ms`` floored to ``step_ms`` (a window boundary: steps tile the day),
        never before ``start``, and never after a finite config's last window."""
        first = max(self.start_ms, moment_ms // step_ms * step_ms)
        if self.end_ms is not None:
            first = min(first, self.end_ms - self.window_ms)
        return first

    @field_validator("sources", mode="wrap")
    @classmethod
    def _unique_names(
        cls, value: Any, handler: ValidatorFunctionWrapHandler
    ) -> tuple[SourceConfig, ...]:
        """Names are compared on the raw entries, so a duplicate is reported along with any
        other problem of the sources; at least one source is required."""
        problems: list[Located] = []
        seen: set[str] = set()
        for index, entry in enumerate(value if isinstance(value, list) else []):
            name = entry.get("name") if isinstance(entry, Mapping) else None
            name = name.strip() if isinstance(name, str) else ""
            if name and name in seen:
                problems.append(((index, "name"), f"duplicate source name {name!r}", name))
            seen.add(name)
        try:
            sources = handler(value)
        except ValidationError as error:
            if not problems:
                raise
            _reraise(error, problems)
        if not sources:
            raise _problem(f"must be a non-empty list of sources (got {_describe(value)})")
        _raise_all(cls.__name__, problems)
        return sources

    @model_validator(mode="after")
    def _avro_schemas_fit(self) -> Config:
        """Every Avro schema a source names is read now, and must fit its columns."""
        problems: list[Located] = []
        for index, source in enumerate(self.sources):
            for part in ("key", "value"):
                try:
                    schema = source.avro_schema(part, self.schema_folder)
                except AvroSchemaError as error:
                    problems.append((("sources", index, f"{part}_avro_schema"), str(error), None))
                    continue
                if schema is None:
                    continue
                columns = source.key if part == "key" else source.value
                after_image = part == "value" and source.envelope.after_image
                problems += [
                    (("sources", index, part, name), problem, columns[name])
                    for name, problem in column_problems(
                        schema, columns, after_image=after_image
                    ).items()
                ]
        _raise_all(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _transaction_members(self) -> Config:
        """A member is a configured Debezium source with JSON values (the transaction id is
        read from the value), in one group only; group names are unique."""
        problems: list[Located] = []
        sources = {source.name: source for source in self.sources}
        owner: dict[str, str] = {}
        names: set[str] = set()
        for index, group in enumerate(self.transactions):
            if group.name in names:
                problems.append(
                    (("transactions", index, "name"), f"duplicate group name {group.name!r}",
                     group.name)
                )
            names.add(group.name)
            for member in group.sources:
                where = ("transactions", index, "sources", member)
                source = sources.get(member)
                if source is None:
                    known = ", ".join(sources)
                    problems.append((where, f"no source named {member!r} (configured: {known})",
                                     member))
                elif not source.envelope.after_image:
                    problems.append((where, "must be a source with envelope debezium or "
                                     f"debezium-upsert (got {source.envelope})", member))
                elif source.value_encoding != RecordEncoding.JSON:
                    problems.append((where, "must have json values: the transaction id is read "
                                     f"from them (got {source.value_encoding})", member))
                if member in owner:
                    problems.append((where, f"already a member of group {owner[member]!r}",
                                     member))
                owner.setdefault(member, group.name)
        _raise_all(type(self).__name__, problems)
        return self

    @model_validator(mode="after")
    def _catalog_in_session(self, info: ValidationInfo) -> Config:
        """An embedded metastore lives beside the config file unless it names a folder; the
        catalog's Spark settings join ``spark.conf`` (where every session builder and
        ``reclock spark-server --config`` look), and one the config sets otherwise is
        refused; two sources must not share a table name (metastores ignore case)."""
        catalog = self.catalog
        if catalog.kind is CatalogKind.NONE:
            return self
        embedded = catalog.kind is CatalogKind.HIVE and catalog.metastore_uri is None
        if embedded and catalog.folder is None:
            base = Path((info.context or {}).get("base_dir", "."))
            folder = (base / METASTORE_FOLDER).resolve()
            catalog = catalog.model_copy(update={"folder": folder})
            object.__setattr__(self, "catalog", catalog)
        problems: list[Located] = []
        wanted = catalog.spark_conf()
        for key, value in wanted.items():
            if self.spark.conf.get(key, value) != value:
                problem = f"must be {value} for catalog kind {catalog.kind} (or left out)"
                problems.append((("spark", "conf", key), problem, self.spark.conf[key]))
        owners: dict[str, str] = {}
        for index, source in enumerate(self.sources):
            name = catalog.table_name(source.name, "state")
            if name in owners:
                problems.append((("sources", index, "name"), f"names the same catalog tables "
                                 f"as source {owners[name]!r} ({name}, ...): metastores "
                                 "ignore case", source.name))  # fmt: skip
            owners.setdefault(name, source.name)
        _raise_all(type(self).__name__, problems)
        if wanted:
            spark = self.spark.model_copy(update={"conf": {**self.spark.conf, **wanted}})
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
    def cron(self) -> str:
        """The cron schedule whose ticks are the window boundaries."""
        return window_cron(self.window_ms)

    def source(self, name: str) -> SourceConfig:
        """The source named ``name``; KeyError listing the configured names otherwise."""
        for source in self.sources:
            if source.name == name:
                return source
        known = ", ".join(s.name for s in self.sources)
        raise KeyError(f"no source named {name!r} (configured: {known})")


def _reraise(error: ValidationError, extra: Sequence[Located]) -> NoReturn:
    """Raise ``error``'s problems and ``extra`` (located in the same list) together; each
    keeps its type, message, location and input, which is all ``_translate`` reads."""
    lines = [
        InitErrorDetails(
            type=PydanticCustomError(detail["type"], detail["msg"]),
            loc=detail["loc"],
            input=detail["input"],
        )
        for detail in error.errors()
    ]
    lines += _details(extra)
    lines.sort(key=lambda line: line["loc"][:1])  # by source index; stable within one
    raise ValidationError.from_exception_data(error.title, lines)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- helpers the rest of the code uses -------------------------------------------------------


def to_struct_type(columns: Mapping[str, str]) -> StructType:
    """A schema mapping (column -> type name) as a Spark schema of nullable columns."""
    return StructType([StructField(name, COLUMN_TYPES[kind]) for name, kind in columns.items()])


def window_cron(window_ms: int) -> str:
    """The cron schedule ticking at every window boundary, aligned to UTC midnight.

    Raises ValueError when no five-field cron schedule can express the window.
    """
    minutes, rest = divmod(window_ms, MS_PER_MINUTE)
    if rest or minutes == 0:
        raise ValueError("must be a whole number of minutes: cron schedules cannot tick faster")
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    hours, rest = divmod(minutes, 60)
    if not rest and hours < 24 and 24 % hours == 0:
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    if minutes == 24 * 60:
        return "0 0 * * *"
    raise ValueError(
        "no cron schedule can express it: use minutes dividing an hour (1m, 5m, 15m, ...), "
        "hours dividing a day (1h, 2h, 6h, ...) or 1d"
    )


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


# libyaml's parser where PyYAML was built with it (about 10x faster than the pure-Python
# one: most of loading a config of two hundred sources); the same safe constructor.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config; relative paths resolve against its folder.

    A landing zone on object storage must be listable (its bucket must exist), and a local
    one, once there, must be a folder: a run on a landing zone it cannot read would bind
    empty windows. (A local folder not there yet is created by whoever lands the first
    dump.)"""
    file = Path(path).expanduser().resolve()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        problem = f"cannot read config: {error.strerror or error}"
        raise ConfigError([ConfigProblem("<file>", problem)], file) from None
    try:
        data = yaml.load(text, Loader=YAML_LOADER)
    except yaml.YAMLError as error:
        raise ConfigError([ConfigProblem("<file>", f"not valid YAML: {error}")], file) from None
    try:
        config = parse_config(data, file.parent)
    except ConfigError as error:
        raise ConfigError(error.problems, file) from None
    try:
        if is_remote(config.landing) or files.exists(str(config.landing)):
            files.require_listable(str(config.landing))
    except LocationUnreachable as error:
        raise ConfigError([ConfigProblem("landing", str(error))], file) from None
    return config


def parse_config(data: Any, base_dir: Path) -> Config:
    """Validate an already-parsed config; relative paths resolve against ``base_dir``.

    Raises ConfigError listing every problem found. The config's ``storage`` block
    becomes the process's (``cdc_core.storage.settings``); with an object-store location,
    it and the environment must be safe (no plain http off this machine, no setting that
    makes commits unconditional).
    """
    try:
        config = Config.model_validate(data, context={"base_dir": Path(base_dir)})
    except ValidationError as error:
        raise ConfigError([_translate(detail) for detail in error.errors()]) from None
    if is_remote(config.lake) or is_remote(config.landing):
        try:
            config.storage.s3.resolved()
        except (InsecureEndpoint, UnsafeCommits, ValueError) as error:
            raise ConfigError([ConfigProblem("storage", str(error))]) from None
    settings.use(config.storage.s3)
    return config


# --- pydantic's errors as config problems ----------------------------------------------------


def _translate(detail: ErrorDetails) -> ConfigProblem:
    """A pydantic error as a problem in the file's own terms."""
    field, _ = _schema_at(detail["loc"])
    kind, value = detail["type"], detail["input"]
    if kind == "missing":
        return ConfigProblem(field, "is required")
    if kind == "extra_forbidden":
        _, section = _schema_at(detail["loc"][:-1])
        keys = list(section.get("properties", {}))
        near = difflib.get_close_matches(str(detail["loc"][-1]), keys, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return ConfigProblem(field, f"unknown key{hint} (expected: {', '.join(keys)})")
    if kind in ("model_type", "dict_type"):
        return ConfigProblem(field, f"must be a mapping (got {_describe(value)})")
    if kind in ("list_type", "tuple_type"):
        return ConfigProblem(field, f"must be a list (got {_describe(value)})")
    if kind == "string_type":
        return ConfigProblem(field, f"must be a string (got {_describe(value)})")
    return ConfigProblem(field, detail["msg"])


def _schema_at(loc: tuple[str | int, ...]) -> tuple[str, dict[str, Any]]:
    """The field path (``sources[1].key.id``) of a pydantic location, and the schema of the
    field it names: the schema tells list indexes from mapping keys, which may be numbers."""
    schema = config_schema()
    path, node = "", _resolve(schema)
    for part in loc:
        if part == "[key]":  # pydantic's marker of a bad mapping key: the key is the field
            continue
        if "items" in node:
            path, node = f"{path}[{part}]", node["items"]
        else:
            path = f"{path}.{part}" if path else str(part)
            values = node.get("additionalProperties")  # a schema, or a bool
            default = values if isinstance(values, dict) else {}
            node = node.get("properties", {}).get(str(part), default)
        node = _resolve(node)
    return path or _ROOT, node


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and the non-null branch of an optional field."""
    if "$ref" in node:
        return _resolve(config_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]])
    branches = [branch for branch in node.get("anyOf", []) if branch.get("type") != "null"]
    return _resolve(branches[0]) if len(branches) == 1 else node
