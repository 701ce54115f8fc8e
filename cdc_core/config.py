"""The reclock configuration file (YAML), validated into frozen dataclasses.

Validation stops at the first problem and raises one ``ConfigError`` whose message
names the field path (``sources[1].envelope``) and what is wrong with it. Unknown
keys are errors too, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql.types import (
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

from cdc_core.envelopes.columns import output_schema as envelope_output_schema
from cdc_core.expectations import ExpectationSpec
from cdc_core.frontier import OffsetFrontier

FORMATS = ("json", "cdcv2-json", "cdcv2-avro")
ENVELOPES = ("none", "upsert", "debezium-upsert", "debezium")
RECLOCK_POLICIES = ("arrival", "event-time")
RETIRE_POLICIES = ("archive", "delete")

# Column types a schema may use; ``long`` is accepted as an alias of ``bigint``.
COLUMN_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "bigint": LongType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    "timestamp": TimestampType(),
    "date": DateType(),
}
TYPE_ALIASES = {"long": "bigint"}

# Shards add these columns to every output, so data columns may not use them.
RESERVED_COLUMNS = ("time", "diff")

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": MS_PER_MINUTE, "h": MS_PER_HOUR, "d": MS_PER_DAY}

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class ConfigError(ValueError):
    """An invalid configuration; ``field`` is the path of the offending field."""

    def __init__(self, field: str, problem: str, file: Path | None = None) -> None:
        self.field = field
        self.problem = problem
        self.file = file
        where = f"{file}: " if file is not None else ""
        super().__init__(f"{where}{field}: {problem}")


@dataclass(frozen=True)
class SparkSettings:
    """Optional Spark overrides; ``master=None`` keeps the local default."""

    master: str | None = None
    conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceConfig:
    """One Kafka topic turned into one set of Delta tables under ``<lake>/<name>``.

    ``key`` and ``value`` map column names to type names (``long`` normalised to ``bigint``),
    in declaration order.
    """

    name: str
    topic: str
    format: str
    key: Mapping[str, str]
    value: Mapping[str, str]
    envelope: str
    reclock: str
    allow_offset_gaps: bool = False
    start_offsets: OffsetFrontier = field(default_factory=OffsetFrontier)
    retire: str = "archive"
    expectations: tuple[ExpectationSpec, ...] = ()

    @property
    def key_schema(self) -> StructType:
        return to_struct_type(self.key)

    @property
    def value_schema(self) -> StructType:
        return to_struct_type(self.value)

    @property
    def output_schema(self) -> StructType:
        """Data columns of the ``changes`` table, as the envelope defines them."""
        return envelope_output_schema(self.envelope, self.key_schema, self.value_schema)


@dataclass(frozen=True)
class Config:
    """The whole configuration; paths are absolute, times are epoch milliseconds (UTC)."""

    lake: Path
    landing: Path
    window: str
    window_ms: int
    start_ms: int
    end_ms: int | None
    sources: tuple[SourceConfig, ...]
    spark: SparkSettings = field(default_factory=SparkSettings)

    @property
    def cron(self) -> str:
        """The cron schedule whose ticks are the window boundaries."""
        return window_cron(self.window_ms)

    def source(self, name: str) -> SourceConfig:
        for source in self.sources:
            if source.name == name:
                return source
        known = ", ".join(s.name for s in self.sources)
        raise KeyError(f"no source named {name!r} (configured: {known})")


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


def load_config(path: str | Path) -> Config:
    """Read and validate a YAML config; relative paths resolve against its folder."""
    file = Path(path).expanduser().resolve()
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(
            "<file>", f"cannot read config: {error.strerror or error}", file
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError("<file>", f"not valid YAML: {error}", file) from None
    try:
        return parse_config(data, file.parent)
    except ConfigError as error:
        raise ConfigError(error.field, error.problem, file) from None


def parse_config(data: Mapping[str, Any], base_dir: Path) -> Config:
    """Validate an already-parsed config mapping; relative paths resolve against ``base_dir``."""
    top = _Section(data, "", "<config>")
    top.allow("lake", "landing", "window", "start", "end", "spark", "sources")
    window_ms = _window_ms(top.required("window"), "window")
    start_ms = _instant_ms(top.required("start"), "start", window_ms)
    end_ms = None
    if top.get("end") is not None:
        end_ms = _instant_ms(top.get("end"), "end", window_ms)
        if end_ms <= start_ms:
            raise ConfigError("end", "must be after start")
    return Config(
        lake=_path(top.required("lake"), "lake", base_dir),
        landing=_path(top.required("landing"), "landing", base_dir),
        window=str(top.required("window")).strip(),
        window_ms=window_ms,
        start_ms=start_ms,
        end_ms=end_ms,
        sources=_sources(top.required("sources"), "sources"),
        spark=_spark(top.get("spark"), "spark"),
    )


class _Section:
    """A mapping being validated, remembering its path for error messages."""

    def __init__(self, data: Any, path: str, label: str | None = None) -> None:
        if not isinstance(data, Mapping):
            raise ConfigError(label or path, f"must be a mapping (got {_describe(data)})")
        self.data = data
        self.path = path

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def allow(self, *keys: str) -> None:
        for key in self.data:
            if key not in keys:
                hint = difflib.get_close_matches(str(key), keys, n=1)
                suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
                expected = ", ".join(keys)
                raise ConfigError(
                    self.field(str(key)), f"unknown key{suggestion} (expected: {expected})"
                )

    def required(self, key: str) -> Any:
        if self.data.get(key) is None:
            raise ConfigError(self.field(key), "is required")
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        value = self.data.get(key)
        return default if value is None else value


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if value is not None else "nothing"


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(where, f"must be a non-empty string (got {_describe(value)})")
    return value.strip()


def _choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(where, f"must be one of {', '.join(choices)} (got {value!r})")
    return value


def _boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(where, f"must be true or false (got {_describe(value)})")
    return value


def _non_negative_int(value: Any, where: str, what: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(where, f"{what} must be a non-negative integer (got {_describe(value)})")
    return value


def _path(value: Any, where: str, base_dir: Path) -> Path:
    path = Path(_string(value, where)).expanduser()
    return path if path.is_absolute() else (base_dir / path).resolve()


def _window_ms(value: Any, where: str) -> int:
    match = _DURATION.match(str(value)) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(where, f"must be a duration such as 1m, 5m, 1h or 1d (got {value!r})")
    window_ms = int(match.group(1)) * DURATION_UNITS_MS[match.group(2)]
    if window_ms == 0 or MS_PER_DAY % window_ms:
        raise ConfigError(
            where, f"must tile the day evenly, so windows align to midnight (got {value!r})"
        )
    try:
        window_cron(window_ms)
    except ValueError as error:
        raise ConfigError(where, f"{error} (got {value!r})") from None
    return window_ms


def _instant_ms(value: Any, where: str, window_ms: int) -> int:
    """An ISO-8601 instant with an explicit UTC offset, on a window boundary."""
    moment = _as_datetime(value)
    if moment is None:
        raise ConfigError(
            where, f"must be an ISO-8601 instant such as 2026-01-01T00:00:00Z (got {value!r})"
        )
    if moment.utcoffset() is None:
        raise ConfigError(where, f"must carry a UTC offset, e.g. a trailing Z (got {value!r})")
    ms = int(moment.astimezone(UTC).timestamp() * 1000)
    if ms % window_ms:
        raise ConfigError(where, f"must lie on a window boundary (got {value!r})")
    return ms


def _as_datetime(value: Any) -> datetime | None:
    """YAML already turns unquoted timestamps into datetimes; strings are parsed here."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def _spark(value: Any, where: str) -> SparkSettings:
    if value is None:
        return SparkSettings()
    section = _Section(value, where)
    section.allow("master", "conf")
    master = section.get("master")
    conf = _Section(section.get("conf", {}), section.field("conf"))
    settings: dict[str, str] = {}
    for key, setting in conf.data.items():
        if isinstance(setting, Mapping | list) or setting is None:
            raise ConfigError(conf.field(str(key)), f"must be a scalar (got {_describe(setting)})")
        settings[str(key)] = str(setting).lower() if isinstance(setting, bool) else str(setting)
    return SparkSettings(
        master=_string(master, section.field("master")) if master is not None else None,
        conf=settings,
    )


def _sources(value: Any, where: str) -> tuple[SourceConfig, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(where, f"must be a non-empty list of sources (got {_describe(value)})")
    sources = tuple(_source(item, f"{where}[{i}]") for i, item in enumerate(value))
    seen: set[str] = set()
    for i, source in enumerate(sources):
        if source.name in seen:
            raise ConfigError(f"{where}[{i}].name", f"duplicate source name {source.name!r}")
        seen.add(source.name)
    return sources


def _source(value: Any, where: str) -> SourceConfig:
    section = _Section(value, where)
    section.allow(
        "name",
        "topic",
        "format",
        "key",
        "value",
        "envelope",
        "reclock",
        "allow_offset_gaps",
        "start_offsets",
        "retire",
        "expectations",
    )
    name = _string(section.required("name"), section.field("name"))
    if not _IDENTIFIER.match(name):
        raise ConfigError(section.field("name"), f"must be an identifier (got {name!r})")
    topic = _string(section.required("topic"), section.field("topic"))
    if not _KAFKA_TOPIC.match(topic):
        raise ConfigError(
            section.field("topic"), f"is not a Kafka topic name (letters, digits, . _ -): {topic!r}"
        )
    source = SourceConfig(
        name=name,
        topic=topic,
        format=_choice(section.get("format", "json"), section.field("format"), FORMATS),
        key=_columns(section.get("key", {}), section.field("key")),
        value=_columns(section.required("value"), section.field("value"), non_empty=True),
        envelope=_choice(section.required("envelope"), section.field("envelope"), ENVELOPES),
        reclock=_choice(section.required("reclock"), section.field("reclock"), RECLOCK_POLICIES),
        allow_offset_gaps=_boolean(
            section.get("allow_offset_gaps", False), section.field("allow_offset_gaps")
        ),
        start_offsets=_start_offsets(section.get("start_offsets"), section.field("start_offsets")),
        retire=_choice(section.get("retire", "archive"), section.field("retire"), RETIRE_POLICIES),
        expectations=_expectations(section.get("expectations"), section.field("expectations")),
    )
    _check_envelope_rules(source, section)
    return source


def _columns(value: Any, where: str, *, non_empty: bool = False) -> dict[str, str]:
    section = _Section(value, where)
    if non_empty and not section.data:
        raise ConfigError(where, "must declare at least one column")
    columns: dict[str, str] = {}
    for column, kind in section.data.items():
        place = section.field(str(column))
        if not isinstance(column, str) or not _IDENTIFIER.match(column):
            raise ConfigError(place, f"column name must be an identifier (got {column!r})")
        if column in RESERVED_COLUMNS:
            raise ConfigError(place, f"column name {column!r} is reserved for shard columns")
        kind = TYPE_ALIASES.get(kind, kind) if isinstance(kind, str) else kind
        if kind not in COLUMN_TYPES:
            names = ", ".join([*COLUMN_TYPES, *TYPE_ALIASES])
            raise ConfigError(place, f"type must be one of {names} (got {kind!r})")
        columns[column] = kind
    return columns


def _start_offsets(value: Any, where: str) -> OffsetFrontier:
    if value is None:
        return OffsetFrontier()
    section = _Section(value, where)
    offsets: dict[int, int] = {}
    for partition, offset in section.data.items():
        place = section.field(str(partition))
        number = _non_negative_int(partition, place, "partition")
        offsets[number] = _non_negative_int(offset, place, "offset")
    return OffsetFrontier(offsets)


def _expectations(value: Any, where: str) -> tuple[ExpectationSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigError(where, f"must be a list of expectations (got {_describe(value)})")
    specs = []
    for i, item in enumerate(value):
        section = _Section(item, f"{where}[{i}]")
        section.allow("type", "kwargs")
        kind = _string(section.required("type"), section.field("type"))
        if not kind.startswith("expect_"):
            raise ConfigError(
                section.field("type"), f"must name an expectation (expect_...), got {kind!r}"
            )
        kwargs = _Section(section.get("kwargs", {}), section.field("kwargs"))
        specs.append(ExpectationSpec(type=kind, kwargs=dict(kwargs.data)))
    return tuple(specs)


def _check_envelope_rules(source: SourceConfig, section: _Section) -> None:
    """Rules tying format, envelope and schemas together."""
    if source.format.startswith("cdcv2") and source.envelope != "none":
        raise ConfigError(
            section.field("envelope"),
            f"format {source.format} carries its own updates and needs envelope none "
            f"(got {source.envelope!r})",
        )
    if source.envelope != "none" and not source.key:
        raise ConfigError(
            section.field("key"), f"envelope {source.envelope} needs at least one key column"
        )
    if source.envelope.startswith("debezium"):
        for column, kind in source.key.items():
            if column not in source.value:
                raise ConfigError(
                    section.field(f"key.{column}"),
                    "key columns must be among the value (after-image) columns of a "
                    "Debezium envelope",
                )
            if source.value[column] != kind:
                raise ConfigError(
                    section.field(f"key.{column}"),
                    f"type {kind} differs from the after-image column's {source.value[column]}",
                )
        return
    for column in source.key:
        if column in source.value:
            raise ConfigError(
                section.field(f"value.{column}"),
                f"clashes with key column {column!r}: the output holds key and value columns",
            )
