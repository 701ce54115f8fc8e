"""The config's cross-field rules: small functions from a model to the problems it has.

Each rule relates fields that are valid on their own (an envelope and its columns, a
transaction group and its members) and returns every ``Problem`` it finds, placed relative
to the model it judges. Parsing judges a built model with ``config_problems``, which places
them from the file's root. A rule reads only the model, except ``avro_schema_problems``,
which reads the schema files a config names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdc_core.calendar import MS_PER_DAY, MS_PER_HOUR, duration_ms, launch_step_ms
from cdc_core.config.catalog import catalog_problems
from cdc_core.config.fields import CDCV2_COLUMN_TYPES, HISTORY_ENVELOPES, MAX_PARTITIONS
from cdc_core.config.problems import Problem, iso
from cdc_core.envelopes.avro_schemas import AvroSchemaError, column_problems
from cdc_core.schemas import HISTORY_COLUMNS
from cdc_core.vocabulary import Envelope, Format, IncludeField, RecordEncoding

if TYPE_CHECKING:
    from cdc_core.config.model import AvroSchemaRef, Config, SourceConfig


def config_problems(config: Config) -> list[Problem]:
    """Every cross-field problem of a built config, placed from the file's root.

    A section's rules come before the whole's, and each group is judged only when the
    groups before it hold (a schema reference is whole before its source is judged, and
    every source before the schemas are read): so a problem is never a consequence of
    another one reported with it.
    """
    problems: list[Problem] = []
    for index, source in enumerate(config.sources):
        references = [
            within(("sources", index, f"{part}_avro_schema"), reference_problems(reference))
            for part, reference in (("key", source.key_avro_schema),
                                    ("value", source.value_avro_schema))
            if reference is not None
        ]  # fmt: skip
        problems += [problem for found in references for problem in found] or within(
            ("sources", index), source_problems(source)
        )
    if problems:
        return problems
    for rule in (partition_problems, avro_schema_problems, transaction_problems):
        if found := rule(config):
            return found
    names = [source.name for source in config.sources]
    return catalog_problems(config.catalog, config.spark.conf, names)


def within(where: tuple[str | int, ...], problems: Sequence[Problem]) -> list[Problem]:
    """``problems`` of the section at ``where``, placed from the file's root."""
    return [problem._replace(where=(*where, *problem.where)) for problem in problems]


def reference_problems(reference: AvroSchemaRef) -> list[Problem]:
    """An Avro schema comes from a file with the id its records carry, or from a subject."""
    problems: list[Problem] = []
    if (reference.file is None) == (reference.subject is None):
        problems.append(Problem((), "give either file (with id) or subject (with version)", None))
    elif reference.file is not None and reference.id is None:
        problems.append(Problem(("id",), "a schema file needs the schema id its records carry"))
    elif reference.subject is not None and reference.id is not None:
        problem = "a subject's version file holds its id already"
        problems.append(Problem(("id",), problem, reference.id))
    return problems


def source_problems(source: SourceConfig) -> list[Problem]:
    """Rules tying the envelope to the key and value columns."""
    problems: list[Problem] = []
    if source.format.cdcv2 != (source.envelope is Envelope.MATERIALIZE):
        problems.append(
            Problem(
                ("envelope",),
                f"format {source.format} needs envelope materialize"
                if source.format.cdcv2
                else f"envelope materialize reads CDCv2 streams: format must be "
                f"{Format.CDCV2_JSON} or {Format.CDCV2_AVRO} (got {source.format})",
                str(source.envelope),
            )
        )
    if source.envelope is Envelope.MATERIALIZE:
        if source.key:
            problems.append(
                Problem(("key",), "a CDCv2 stream has no key: its rows are its data", source.key)
            )
        problems += [
            Problem(("value", name), f"type {kind} cannot be carried by a CDCv2 stream "
             f"(supported: {', '.join(CDCV2_COLUMN_TYPES)})", kind)
            for name, kind in source.value.items()
            if kind not in CDCV2_COLUMN_TYPES
        ]
    problems += encoding_problems(source)
    problems += include_problems(source)
    if source.envelope.keyed and not source.key:
        problems.append(
            Problem(
                ("key",), f"envelope {source.envelope} needs at least one key column", source.key
            )
        )
    for column, kind in source.key.items():
        if not source.envelope.after_image:
            if column in source.value:
                problems.append(
                    Problem(
                        ("value", column),
                        f"clashes with key column {column!r}: "
                        "the output holds key and value columns",
                        source.value[column],
                    )
                )
        elif column not in source.value:
            problems.append(
                Problem(
                    ("key", column),
                    "key columns must be among the value (after-image) columns of a "
                    "Debezium envelope",
                    kind,
                )
            )
        elif source.value[column] != kind:
            problems.append(
                Problem(
                    ("key", column),
                    f"type {kind} differs from the after-image column's {source.value[column]}",
                    kind,
                )
            )
    problems += history_problems(source)
    return problems


def encoding_problems(source: SourceConfig) -> list[Problem]:
    """Each encoding must be able to fill the columns it decodes into."""
    problems: list[Problem] = []
    parts = (
        ("key", source.key_encoding, source.key_avro_schema, source.key),
        ("value", source.value_encoding, source.value_avro_schema, source.value),
    )
    for part, encoding, avro, columns in parts:
        field = f"{part}_encoding"
        if source.format.cdcv2 and encoding is not RecordEncoding.JSON:
            problem = f"format {source.format} decodes its own values"
            problems.append(Problem((field,), problem, encoding))
        elif part == "key" and not source.key and encoding is not RecordEncoding.JSON:
            problems.append(Problem((field,), "there are no key columns to decode", encoding))
        elif avro is None and encoding is RecordEncoding.AVRO:
            problems.append(Problem((f"{part}_avro_schema",), f"{field} avro needs it", None))
        elif avro is not None and encoding is not RecordEncoding.AVRO:
            problems.append(
                Problem((f"{part}_avro_schema",), f"is only for {field} avro (got {encoding})")
            )
        kind = encoding.single_column
        if kind is None or not columns:
            continue
        if part == "value" and source.envelope.after_image:
            problems.append(
                Problem((field,), f"envelope {source.envelope} needs json or avro values", encoding)
            )
        elif list(columns.values()) != [kind]:
            problems.append(
                Problem((field,), f"{encoding} fills exactly one {part} column, of type {kind} "
                 f"(got {', '.join(f'{n}: {t}' for n, t in columns.items())})", encoding)
            )
    return problems


def include_problems(source: SourceConfig) -> list[Problem]:
    """Metadata columns must be new names, and mean something for the envelope."""
    problems: list[Problem] = []
    refused = {
        Envelope.DEBEZIUM: set(IncludeField),  # rows come from before and after images
        Envelope.MATERIALIZE: set(IncludeField),  # rows come from a stream's updates
        # As in Materialize: the after image holds the key, and headers are refused.
        Envelope.DEBEZIUM_UPSERT: {IncludeField.KEY, IncludeField.HEADERS},
    }.get(source.envelope, set())
    seen: set[IncludeField] = set()
    for index, field in enumerate(source.include):
        if field in refused:
            problem = f"envelope {source.envelope} cannot include {field}"
        elif field in seen:
            problem = f"{field} is included twice"
        elif field in source.key or field in source.value:
            problem = f"column {field!r} is already a key or value column"
        else:
            seen.add(field)
            continue
        problems.append(Problem(("include", index), problem, str(field)))
    return problems


def history_problems(source: SourceConfig) -> list[Problem]:
    """A history needs versions of keys, and its own columns beside the output's."""
    if not source.history:
        return []
    if source.envelope not in HISTORY_ENVELOPES:
        why = (
            "its changes only ever insert, so `changes` already is its history"
            if source.envelope is Envelope.NONE
            else "its changes keep duplicates and are not one row per key"
        )
        return [
            Problem(
                ("history",),
                f"needs envelope upsert or debezium-upsert (got {source.envelope}: {why})",
                source.history,
            )
        ]
    clashes = [name for name in HISTORY_COLUMNS.names if name in (*source.key, *source.value)]
    problems: list[Problem] = [
        Problem(
            ("value" if column in source.value else "key", column),
            "is a column of the history table; rename it or set history: false",
            column,
        )
        for column in clashes
    ]
    problems += [
        Problem(
            ("include", index),
            f"{field} is a column of the history table (the position of the record that "
            "wrote each version); leave it out or set history: false",
            str(field),
        )
        for index, field in enumerate(source.include)
        if field in HISTORY_COLUMNS.names
    ]
    return problems


def partition_problems(config: Config) -> list[Problem]:
    """Dagster's guidance: at most 100,000 partitions per asset, at any age. With a
    launchable span the set spans it and the hour its start is floored by; without one
    (a finite config), the longest retention and the day its horizon is floored by, or
    every window from start to end."""
    window_ms = config.window_ms
    guidance = f"Dagster's guidance of {MAX_PARTITIONS:,} partitions per asset"
    finite = None if config.end_ms is None else (config.end_ms - config.start_ms) // window_ms
    problems: list[Problem] = []
    retentions: dict[tuple[str | int, ...], str] = {}
    if config.retention is not None:
        retentions[("retention",)] = config.retention
    for index, source in enumerate(config.sources):
        if source.retention is not None:
            retentions[("sources", index, "retention")] = source.retention
    kept_by_all = config.retention is not None or all(s.retention for s in config.sources)
    if config.launchable_ms is not None:
        step = launch_step_ms(window_ms)
        windows = (config.launchable_ms + step) // window_ms
        if finite is not None:  # a finite config holds no more than its windows
            windows = min(windows, finite)
        if windows > MAX_PARTITIONS:
            longest = (MAX_PARTITIONS * window_ms - step) // MS_PER_DAY
            problems.append(Problem(("launchable",), (
                f"lists up to {windows:,} windows of {config.window} (the span and an "
                f"hour), more than {guidance}: at most {longest}d for {config.window} "
                f"windows (got {config.launchable!r})"
            ), config.launchable))
    elif retentions and kept_by_all and finite is not None:
        longest = (MAX_PARTITIONS * window_ms - MS_PER_DAY) // MS_PER_DAY
        where, retention = max(retentions.items(), key=lambda item: duration_ms(item[1]))
        windows = min((duration_ms(retention) + MS_PER_DAY) // window_ms, finite)
        if windows > MAX_PARTITIONS:
            problems.append(Problem(where, (
                f"keeps up to {windows:,} windows of {config.window} (the retention and a "
                f"day), more than {guidance}: at most {longest}d for {config.window} "
                f"windows, or a launchable span (got {retention!r})"
            ), retention))
    elif finite is not None and config.end_ms is not None and finite > MAX_PARTITIONS:
        longest = (MAX_PARTITIONS * window_ms - MS_PER_HOUR) // MS_PER_DAY
        problems.append(Problem(("end",), (
            f"{finite:,} windows of {config.window} lie between start and end, more "
            f"than {guidance}: set a launchable span (at most {longest}d) or a wider "
            "window"
        ), iso(config.end_ms)))
    return problems


def avro_schema_problems(config: Config) -> list[Problem]:
    """Every Avro schema a source names is read now, and must fit its columns."""
    problems: list[Problem] = []
    for index, source in enumerate(config.sources):
        for part in ("key", "value"):
            try:
                schema = source.avro_schema(part, config.schema_folder)
            except AvroSchemaError as error:
                where = ("sources", index, f"{part}_avro_schema")
                problems.append(Problem(where, str(error)))
                continue
            if schema is None:
                continue
            columns = source.key if part == "key" else source.value
            after_image = part == "value" and source.envelope.after_image
            problems += [
                Problem(("sources", index, part, name), problem, columns[name])
                for name, problem in column_problems(
                    schema, columns, after_image=after_image
                ).items()
            ]
    return problems


def transaction_problems(config: Config) -> list[Problem]:
    """A member is a configured Debezium source with JSON values (the transaction id is
    read from the value), in one group only; group names are unique."""
    problems: list[Problem] = []
    sources = {source.name: source for source in config.sources}
    owner: dict[str, str] = {}
    names: set[str] = set()
    for index, group in enumerate(config.transactions):
        if group.name in names:
            problems.append(
                Problem(("transactions", index, "name"), f"duplicate group name {group.name!r}",
                 group.name)
            )
        names.add(group.name)
        for member in group.sources:
            where = ("transactions", index, "sources", member)
            source = sources.get(member)
            if source is None:
                known = ", ".join(sources)
                problems.append(Problem(where, f"no source named {member!r} (configured: {known})",
                                 member))
            elif not source.envelope.after_image:
                problems.append(Problem(where, "must be a source with envelope debezium or "
                                 f"debezium-upsert (got {source.envelope})", member))
            elif source.value_encoding != RecordEncoding.JSON:
                problems.append(Problem(where, "must have json values: the transaction id is read "
                                 f"from them (got {source.value_encoding})", member))
            if member in owner:
                problems.append(Problem(where, f"already a member of group {owner[member]!r}",
                                 member))
            owner.setdefault(member, group.name)
    return problems

