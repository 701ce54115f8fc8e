"""The ``reclock`` command line: sample, materialize, inspect, maintain, retire, rebuild,
readers, demo, config, spark-server, class-archive."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from cdc_core.app import status, upkeep
from cdc_core.app.errors import USAGE_ERRORS
from cdc_core.app.session import recording_class_archive, serve_spark
from cdc_core.app.upkeep import RetireReport
from cdc_core.calendar import duration_ms, to_ms
from cdc_core.config import (
    Config,
    ConfigError,
    config_schema_json,
    load_config,
)
from cdc_core.frontier import iso
from cdc_core.shard.leases import LeaseUsageError
from cdc_core.spark import CLASS_ARCHIVE
from cdc_core.spark_server import DEFAULT_PORT
from pipelines import json_output
from pipelines.run import materialize
from pipelines.run_output import quiet_instance
from pipelines.run_summary import print_summary, summaries_heard
from pipelines.sample import write_sample

# Of the sample's eight windows: every source, check and export runs in the first two.
CLASS_ARCHIVE_WINDOWS = 2


def write_class_archive() -> Path:
    """Write the class archive later sessions map (``cdc_core.spark.CLASS_ARCHIVE``), and
    return where: the sample's first windows, every source, check and export, run in
    process on an ephemeral instance while the JVM records the classes it loads
    (``cdc_core.app.session.recording_class_archive``)."""
    os.environ.pop("DAGSTER_HOME", None)
    with recording_class_archive() as archive, tempfile.TemporaryDirectory() as workdir:
        config = load_config(write_sample(Path(workdir)))
        if not materialize(config, config.start_ms + CLASS_ARCHIVE_WINDOWS * config.window_ms):
            raise RuntimeError("the sample's run failed: no class archive written")
    return archive


def _named(source: str | None) -> list[str] | None:
    """The sources a command asks for: the one named, or every one (None)."""
    return None if source is None else [source]


def print_retired(source: str, report: RetireReport) -> None:
    """What ``retire`` did to one source: the frontier committed, each file and where it went."""
    print(f"{source}: {report}")
    for path, target in sorted(report.archived.items()):
        print(f"  archived {path} -> {target}")
    for path in report.deleted:
        print(f"  deleted {path}")


def print_inspection(config: Config, source: str | None) -> None:
    """``reclock inspect``: frontiers, lag and tables of each source."""
    for found in status.statuses(config, _named(source), transactions=True):
        print(found.describe())
        print()


def print_snapshot(
    config: Config,
    source: str,
    as_of: int,
    out: Path | None,
    fmt: str,
    limit: int,
    *,
    as_json: bool = False,
) -> None:
    """A source's rows at IntoTime ``as_of``: printed, or written by Spark to ``out``
    (Parquet or a Delta table) without passing through this process; ``as_json``: as one
    JSON document (``pipelines.json_output``)."""
    rows = status.snapshot(config, source, as_of)
    if out is None:
        shown = rows.limit(limit + 1).toArrow().to_pylist()
        if as_json:
            document = json_output.snapshot(source, as_of, rows.count(), shown, limit)
            print(json_output.dumps(document))
            return
        print(f"{source} as of {iso(as_of)}: {rows.count()} row(s)")
        for row in shown[:limit]:
            print("  " + ", ".join(f"{name}={value!r}" for name, value in row.items()))
        if len(shown) > limit:
            print(f"  ... (first {limit} shown; --out DIR writes them all)")
        return
    rows.write.format(fmt).mode("error").save(str(out.resolve()))
    if as_json:
        print(json_output.dumps(json_output.written_snapshot(source, as_of, str(out), fmt)))
        return
    print(f"{source} as of {iso(as_of)}: written to {out} ({fmt})")


def print_readers(config: Config, only: str | None) -> None:
    """Every registered reader and writer of every shard, read from the logs alone."""
    for source, found in status.reader_holds(config, only).items():
        print(f"source {source}:")
        for hold in found:
            print(hold.describe())
        if not found:
            print("  no registered readers or writers")


def manage_reader(config: Config, args: argparse.Namespace) -> None:
    """``reclock readers register|heartbeat|release`` on one shard of one source."""
    source = config.source(args.source).name
    book = status.lease_book(config, source, args.table)
    lease_ms = args.lease or config.readers.lease_ms
    if args.action == "register":
        if args.since is None:
            raise LeaseUsageError("register needs --since")
        held = book.register(args.reader, args.since, lease_ms)
        print(f"{args.reader} holds {source}/{args.table} from {iso(held.since)} at version "
              f"{held.version}, until {iso(held.expires_ms)} (log time) unless renewed")
    elif args.action == "heartbeat":
        renewed = book.heartbeat(args.reader, lease_ms if args.lease else None)
        print(f"{args.reader} renewed until {iso(renewed.expires_ms)} (log time)")
    else:
        book.release(args.reader)
        print(f"{args.reader} released {source}/{args.table}")


def print_rebuilt(config: Config, name: str, through_ms: int | None) -> None:
    """Rebuild one source through its closed windows (``--through``), then say where the
    old tables are kept."""
    rebuilt = upkeep.rebuild_through(config, name, through_ms, int(time.time() * 1000))
    if rebuilt is None:
        print(f"{name}: nothing to rebuild: no window has closed yet.")
        return
    report, end = rebuilt
    kept = f"; the old tables are kept in {report.kept}" if report.kept else ""
    print(f"{name}: rebuilt through {iso(end)} ({report.windows} windows){kept}")


def parse_lease(text: str) -> int:
    """A positive duration (``30m``) in milliseconds; argparse error otherwise."""
    try:
        lease_ms = duration_ms(text)
    except ValueError:
        lease_ms = 0
    if lease_ms <= 0:
        raise argparse.ArgumentTypeError(f"not a positive duration such as 30m or 2h: {text!r}")
    return lease_ms


CONFIG_HELP = "the reclock config file (YAML), e.g. demo/reclock.yaml"
JSON_HELP = "print one JSON document in a stable shape, for scripts (see the JSON reference)"
VERBOSE_HELP = "also print Dagster's event log (every step's events) on the terminal"
WORKDIR_HELP = "folder for the demo's dumps, config, lake and Dagster instance (default: demo)"


def parse_setting(text: str) -> tuple[str, str]:
    """A ``KEY=VALUE`` Spark setting."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def parse_time(text: str) -> int:
    """An ISO time (``Z`` accepted) as epoch milliseconds."""
    return to_ms(datetime.fromisoformat(text.replace("Z", "+00:00")))


def build_parser() -> argparse.ArgumentParser:
    """The ``reclock`` command line's parser: every command and option, with its help (the
    CLI reference of the documentation is generated from it)."""
    parser = argparse.ArgumentParser(prog="reclock", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    sample = commands.add_parser("sample", help="write the demo dumps and config")
    sample.add_argument("--workdir", type=Path, default=Path("demo"), help=WORKDIR_HELP)
    run = commands.add_parser("materialize", help="materialize every closed window")
    run.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    run.add_argument(
        "--through", type=parse_time, help="ISO-8601 UTC: the last window end to materialize"
    )
    run.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    inspect = commands.add_parser("inspect", help="frontiers, versions, row counts, errors")
    inspect.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    inspect.add_argument("--source", help="only this source (default: every source)")
    inspect.add_argument("--json", action="store_true", help=JSON_HELP)
    maintain = commands.add_parser(
        "maintain", help="retire, compact, collect garbage and trim logs (the daily job)"
    )
    maintain.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    maintain.add_argument("--source", help="only this source (default: every source)")
    retire = commands.add_parser("retire", help="archive dumps below the resumption frontier")
    retire.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    retire.add_argument("--source", help="only this source (default: every source)")
    snapshot = commands.add_parser(
        "snapshot", help="a source's rows as they stood at an IntoTime (time travel)"
    )
    snapshot.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    snapshot.add_argument("--source", required=True, help="the source's name in the config")
    snapshot.add_argument(
        "--as-of", type=parse_time, required=True, help="ISO-8601 UTC, e.g. 2026-01-01T00:05:00Z"
    )
    snapshot.add_argument("--out", type=Path, help="write the rows to this new folder")
    snapshot.add_argument(
        "--format",
        choices=("table", "parquet", "delta"),
        help="table: print (the default without --out); parquet or delta: with --out",
    )
    snapshot.add_argument("--limit", type=int, default=50, help="rows printed (default 50)")
    snapshot.add_argument("--json", action="store_true", help=JSON_HELP)
    readers = commands.add_parser(
        "readers", help="list, register, renew or release the readers holding a source's history"
    )
    readers.add_argument(
        "action", nargs="?", default="list", choices=("list", "register", "heartbeat", "release")
    )
    readers.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    readers.add_argument("--source", help="the source (required to register, renew, release)")
    readers.add_argument("--table", default="changes", help="the shard held (default changes)")
    readers.add_argument("--reader", help="the reader's id: letters, digits, _ and -")
    readers.add_argument("--since", type=parse_time, help="ISO-8601 UTC: oldest time read")
    readers.add_argument(
        "--lease", type=parse_lease, help="e.g. 30m, 2h (default: the config's readers.lease)"
    )
    readers.add_argument("--json", action="store_true", help=f"list: {JSON_HELP}")
    rebuild_source = commands.add_parser(
        "rebuild",
        help="build a source's tables anew from its dumps beside the old ones, swap them in "
        "once complete (for a config change that cannot evolve the tables)",
    )
    rebuild_source.add_argument("--config", type=Path, required=True, help=CONFIG_HELP)
    rebuild_source.add_argument("--source", required=True, help="the source's name in the config")
    rebuild_source.add_argument(
        "--through", type=parse_time, help="ISO-8601 UTC: the last window end to rebuild"
    )
    server = commands.add_parser(
        "spark-server",
        help="run a warm, Delta-enabled Spark Connect server on 127.0.0.1 in the foreground "
        "(runs attach with SPARK_REMOTE=sc://localhost:PORT and find its token)",
    )
    server.add_argument("--port", type=int, default=DEFAULT_PORT, help="default %(default)s")
    server.add_argument("--master", help="the server's Spark master (default local[2])")
    server.add_argument(
        "--conf", action="append", default=[], type=parse_setting, metavar="KEY=VALUE",
        help="a Spark setting of the server, e.g. spark.driver.memory=2g (repeatable)",
    )
    server.add_argument(
        "--config", type=Path,
        help="a config the server will run: its Spark settings, and the s3a settings of an "
        "s3:// lake or landing zone (the --conf settings win)",
    )  # fmt: skip
    commands.add_parser(
        "class-archive",
        help=f"record the JVM classes a run loads in {CLASS_ARCHIVE}, so later Spark sessions "
        "start faster (make does this once; RECLOCK_CLASS_ARCHIVE names another file)",
    )
    demo = commands.add_parser("demo", help="sample + materialize + summary")
    demo.add_argument("--workdir", type=Path, default=Path("demo"), help=WORKDIR_HELP)
    demo.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    config_file = commands.add_parser("config", help="the config file: its JSON Schema, checks")
    config_actions = config_file.add_subparsers(dest="action", required=True)
    config_actions.add_parser("schema", help="print the JSON Schema of the config file")
    check = config_actions.add_parser("check", help="validate a config file (starts no Spark)")
    check.add_argument("file", type=Path, help="the reclock YAML file to validate")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The ``reclock`` command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)

    try:
        if args.command == "sample":
            print(f"Sample written; config: {write_sample(args.workdir)}")
            return 0
        if args.command == "spark-server":
            config = None if args.config is None else load_config(args.config)
            return serve_spark(config, args.port, args.master, dict(args.conf))
        if args.command == "class-archive":
            print(f"Class archive written: {write_class_archive()}")
            return 0
        if args.command == "config" and args.action == "schema":
            print(config_schema_json(), end="")
            return 0
        if args.command == "config":
            sources = len(load_config(args.file).sources)
            print(f"ok: {sources} source{'s' if sources != 1 else ''}")
            return 0
        if args.command == "demo":
            config = load_config(write_sample(args.workdir))
            home = (args.workdir / "dagster").resolve()
            quiet_instance(home)
            os.environ.setdefault("DAGSTER_HOME", str(home))  # `make ui` shows these runs
            with summaries_heard() as heard:
                # Eight windows of a few hundred records: a short run, whose driver
                # starts quick (about 48 s against 57 s for the run).
                ok = materialize(config, verbose=args.verbose, short=True)
            print_summary(config, heard)
            return 0 if ok else 1
        config = load_config(args.config)
        if args.command == "materialize":
            with summaries_heard() as heard:
                ok = materialize(config, args.through, verbose=args.verbose)
            print_summary(config, heard)
            return 0 if ok else 1
        if args.command == "snapshot":
            fmt = args.format or ("parquet" if args.out else "table")
            if (fmt == "table") != (args.out is None):
                parser.error("--format table prints; parquet and delta need --out DIR")
            print_snapshot(
                config, args.source, args.as_of, args.out, fmt, args.limit, as_json=args.json
            )
            return 0
        if args.command == "inspect" and args.json:
            found = status.statuses(config, _named(args.source), transactions=True)
            print(json_output.dumps(json_output.inspection(found)))
            return 0
        if args.command == "inspect":
            print_inspection(config, args.source)
            return 0
        if args.command == "readers":
            if args.action == "list" and args.json:
                holds = status.reader_holds(config, args.source)
                print(json_output.dumps(json_output.readers(holds)))
                return 0
            if args.action == "list":
                print_readers(config, args.source)
                return 0
            if args.source is None or args.reader is None:
                parser.error(f"readers {args.action} needs --source and --reader")
            manage_reader(config, args)
            return 0
        if args.command == "rebuild":
            print_rebuilt(config, args.source, args.through)
            return 0
        if args.command == "maintain":
            for done in upkeep.maintain_sources(config, args.source, int(time.time() * 1000)):
                print(done.describe())
            return 0
        if args.command == "retire":
            for name, report in upkeep.retire_sources(config, args.source, int(time.time() * 1000)):
                print_retired(name, report)
            return 0
    except ConfigError as error:
        print(f"reclock: invalid config:\n{error}", file=sys.stderr)
        return 2
    except USAGE_ERRORS as error:
        print(f"reclock: {error.args[0] if error.args else error}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
