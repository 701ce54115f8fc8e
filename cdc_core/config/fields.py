"""The field types of the config file: what one value must be, and its JSON Schema.

Each type validates one value alone (a duration, an instant, a column map, a folder or URL)
and says what it must be when it is not, so a file's every problem is reported at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
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

from cdc_core.calendar import (
    DURATION,
    MS_PER_DAY,
    duration_ms,
    window_cron,
)
from cdc_core.checks import ExpectationSpec
from cdc_core.config.problems import describe, refusal
from cdc_core.envelopes.avro_schemas import (
    LATEST,
)
from cdc_core.envelopes.columns import SHARD_COLUMNS
from cdc_core.frontier import OffsetFrontier
from cdc_core.storage import (
    Location,
    UnsupportedScheme,
)
from cdc_core.vocabulary import (
    Envelope,
    Format,
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

# Dagster's guidance: at most this many partitions per asset.
MAX_PARTITIONS = 100_000
DEFAULT_RETENTION = "30d"
# How far back an open-ended config's windows are Dagster partitions when it names no span.
DEFAULT_LAUNCHABLE = "6h"

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Kafka's own rule, "." and ".." excepted as Kafka excepts them: a topic names the folder
# <landing>/<topic>, which must not be the landing zone or its parent.
KAFKA_TOPIC = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]{1,249}")
# The envelopes whose changes are versions of keys (one row per key at a time).
HISTORY_ENVELOPES = (Envelope.UPSERT, Envelope.DEBEZIUM_UPSERT)



def nonempty_text(value: Any) -> str:
    """A string with something in it, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise refusal(f"must be a non-empty string (got {describe(value)})")
    return value.strip()


def _matching(pattern: re.Pattern[str], problem: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise refusal(problem.format(text=text))
        return text

    return check


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise refusal(f"must be true or false (got {describe(value)})")
    return value


def count_of(what: str) -> Callable[[Any], int]:
    """An integer >= 0; digit strings count too, as YAML mapping keys may be quoted."""

    def check(value: Any) -> int:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise refusal(f"{what} must be a non-negative integer (got {describe(value)})")
        return value

    return check


def one_of(vocabulary: type[StrEnum]) -> BeforeValidator:
    """A validator taking a name of ``vocabulary``, listing them all when it is not one."""
    names = ", ".join(vocabulary)

    def check(value: Any) -> StrEnum:
        try:
            return vocabulary(value)
        except ValueError:
            raise refusal(f"must be one of {names} (got {value!r})") from None

    return BeforeValidator(check)


def _column_name(value: Any) -> str:
    if not isinstance(value, str) or not IDENTIFIER.fullmatch(value):
        raise refusal(f"column name must be an identifier (got {value!r})")
    if value in SHARD_COLUMNS:
        raise refusal(f"column name {value!r} is reserved for shard columns")
    return value


def _column_type(value: Any) -> str:
    kind = TYPE_ALIASES.get(value, value) if isinstance(value, str) else value
    if kind not in COLUMN_TYPES:
        names = ", ".join([*COLUMN_TYPES, *TYPE_ALIASES])
        raise refusal(f"type must be one of {names} (got {value!r})")
    return kind


def some_columns(columns: dict[str, str]) -> dict[str, str]:
    """A column map with at least one column."""
    if not columns:
        raise refusal("must declare at least one column")
    return columns


_OWNER = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+|team:[A-Za-z0-9_-]+")


def owner_name(value: str) -> str:
    """An owner Dagster shows: an e-mail address or ``team:<name>``."""
    if not _OWNER.fullmatch(value):
        raise refusal(f"must be an e-mail address or team:<name> (got {value!r})")
    return value


def _duration(value: Any) -> str:
    if not isinstance(value, str) or not DURATION.fullmatch(value.strip()):
        raise refusal(f"must be a duration such as 1m, 5m, 1h or 1d (got {value!r})")
    return value.strip()


def schedulable(window: str) -> str:
    """Windows tile the day from UTC midnight and are ticked by a cron schedule."""
    window_ms = duration_ms(window)
    if window_ms == 0 or MS_PER_DAY % window_ms:
        raise refusal(f"must tile the day evenly, so windows align to midnight (got {window!r})")
    try:
        window_cron(window_ms)
    except ValueError as error:
        raise refusal(f"{error} (got {window!r})") from None
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
        raise refusal(
            f"must be an ISO-8601 instant such as 2026-01-01T00:00:00Z (got {value!r})"
        )
    if moment.utcoffset() is None:
        raise refusal(f"must carry a UTC offset, e.g. a trailing Z (got {value!r})")
    return int(moment.astimezone(UTC).timestamp() * 1000)


def _absolute(value: Any, info: ValidationInfo) -> Path:
    """Relative paths resolve against the ``base_dir`` of the validation context."""
    path = Path(nonempty_text(value)).expanduser()
    if path.is_absolute():
        return path
    if not info.context or "base_dir" not in info.context:
        raise RuntimeError("validate a Config with context={'base_dir': <config folder>}")
    return (Path(info.context["base_dir"]) / path).resolve()


def _place(value: Any, info: ValidationInfo) -> Path | Location:
    """A local folder as an absolute Path (relative: to the ``base_dir`` of the validation
    context), or an object-store URL as a Location; a URL scheme reclock cannot reach is
    refused here, never read as a folder name."""
    text = nonempty_text(value)
    if not info.context or "base_dir" not in info.context:
        raise RuntimeError("validate a Config with context={'base_dir': <config folder>}")
    try:
        place = Location.parse(text, Path(info.context["base_dir"]))
    except UnsupportedScheme as error:
        raise refusal(str(error)) from None
    except ValueError as error:
        raise refusal(str(error)) from None
    return Path(place) if place.is_local else place


def _spark_setting(value: Any) -> str:
    """Spark takes settings as strings; YAML booleans are spelled the way Spark expects."""
    if isinstance(value, Mapping | list) or value is None:
        raise refusal(f"must be a scalar (got {describe(value)})")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _frontier(value: Any) -> OffsetFrontier:
    return OffsetFrontier(_OFFSETS.validate_python(value))


def _expectation(value: Any) -> ExpectationSpec:
    entry = _Expectation.model_validate(value)
    return ExpectationSpec(type=entry.type, kwargs=entry.kwargs)


def _expectation_type(kind: str) -> str:
    if not kind.startswith("expect_"):
        raise refusal(f"must name an expectation (expect_...), got {kind!r}")
    return kind


Text = Annotated[
    str, BeforeValidator(nonempty_text), WithJsonSchema({"type": "string", "minLength": 1})
]
Identifier = Annotated[
    str,
    BeforeValidator(nonempty_text),
    AfterValidator(_matching(IDENTIFIER, "must be an identifier (got {text!r})")),
    WithJsonSchema({"type": "string", "pattern": f"^{IDENTIFIER.pattern}$"}),
]
Topic = Annotated[
    str,
    BeforeValidator(nonempty_text),
    AfterValidator(
        _matching(KAFKA_TOPIC, "is not a Kafka topic name (letters, digits, . _ -, "
                                "but not . or ..): {text!r}")  # fmt: skip
    ),
    WithJsonSchema({"type": "string", "pattern": f"^{KAFKA_TOPIC.pattern}$"}),
]
Flag = Annotated[bool, BeforeValidator(_flag)]
SourceFormat = Annotated[Format, one_of(Format), WithJsonSchema({"enum": list(Format)})]
Folder = Annotated[
    Path, BeforeValidator(_absolute), WithJsonSchema({"type": "string", "minLength": 1})
]
Place = Annotated[
    Path | Location, BeforeValidator(_place), WithJsonSchema({"type": "string", "minLength": 1})
]
Duration = Annotated[
    str,
    BeforeValidator(_duration),
    WithJsonSchema({"type": "string", "pattern": rf"^\s*{DURATION.pattern}\s*$"}),
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
                "pattern": f"^{IDENTIFIER.pattern}$",
                "not": {"enum": list(SHARD_COLUMNS)},
            },
            "additionalProperties": {"enum": [*COLUMN_TYPES, *TYPE_ALIASES]},
        }
    ),
]
SparkSetting = Annotated[
    str, BeforeValidator(_spark_setting), WithJsonSchema({"type": ["string", "number", "boolean"]})
]
Partition = Annotated[int, BeforeValidator(count_of("partition"))]
Offset = Annotated[
    int, BeforeValidator(count_of("offset")), WithJsonSchema({"type": "integer", "minimum": 0})
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



class Section(BaseModel):
    """A mapping of the file: frozen, unknown keys refused, fields documented in the schema."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """An empty YAML value is null: the key's default applies, or it is reported missing."""
        if isinstance(data, Mapping):
            return {key: value for key, value in data.items() if value is not None}
        return data


class _Expectation(Section):
    """One great-expectations expectation, run on each window's changes by an asset check."""

    model_config = ConfigDict(title="Expectation")

    type: Annotated[str, BeforeValidator(nonempty_text), AfterValidator(_expectation_type)]
    """The expectation, in snake case: expect_column_values_to_not_be_null, ..."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Its arguments, e.g. {column: id}."""


Expectation = Annotated[
    ExpectationSpec, PlainValidator(_expectation), WithJsonSchema(_Expectation.model_json_schema())
]


# The Spark settings that hold credentials: Spark's own ``spark.redaction.regex`` default.
CREDENTIAL_SETTING = re.compile(r"(?i)secret|password|token|access[.]?key")



def positive(duration: str) -> str:
    """A duration longer than zero."""
    if duration_ms(duration) <= 0:
        raise refusal(f"must be longer than zero (got {duration!r})")
    return duration



def schema_version(value: Any) -> int | str:
    """A subject version: a number from 1, or ``latest``."""
    if value == LATEST or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise refusal(f"must be a version number (1, 2, ...) or latest (got {value!r})")



def to_struct_type(columns: Mapping[str, str]) -> StructType:
    """A schema mapping (column -> type name) as a Spark schema of nullable columns."""
    return StructType([StructField(name, COLUMN_TYPES[kind]) for name, kind in columns.items()])


