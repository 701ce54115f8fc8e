"""The class archive (``reclock class-archive``, written by ``make``): a fresh process's
session maps it, a damaged one is never installed, and the driver options that decide
class sharing themselves are kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cdc_core.app.session import maps_cleanly
from cdc_core.spark import CLASS_ARCHIVE, DRIVER_JAVA_OPTIONS, session_conf, with_class_archive

# A fresh process whose session logs where its JVM loaded each class from.
SESSION = """
import sys
from cdc_core.spark import get_spark
logged = f"-Xlog:class+load=info:file={sys.argv[1]}"
spark = get_spark(conf={"spark.driver.extraJavaOptions": logged})
assert spark.range(5).selectExpr("sum(id)").first()[0] == 10
"""


def test_a_fresh_session_loads_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    assert CLASS_ARCHIVE.is_file(), f"no archive at {CLASS_ARCHIVE}: run `reclock class-archive`"
    log = tmp_path / "classes.log"
    subprocess.run([sys.executable, "-c", SESSION, str(log)], check=True, timeout=600)
    sources = {
        line.split(" source: ")[0].split()[-1]: line.split(" source: ")[1]
        for line in log.read_text().splitlines()
        if " source: " in line
    }
    assert sources["org.apache.spark.SparkContext"] == "shared objects file (top)"
    assert sources["org.apache.spark.sql.execution.SparkPlan"] == "shared objects file (top)"


def test_driver_options_that_decide_class_sharing_are_kept(tmp_path: Path) -> None:
    archive = tmp_path / "classes.jsa"
    assert with_class_archive("-Dx=1", archive) == "-Dx=1"  # no archive: nothing to map
    archive.write_bytes(b"")
    assert with_class_archive("-Dx=1", archive) == (
        f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Dx=1"
    )
    assert with_class_archive("", archive) == f"-XX:SharedArchiveFile={archive} -Xlog:cds=off"
    for own in ("-Xshare:off", f"-XX:ArchiveClassesAtExit={archive}", "-XX:SharedArchiveFile=a"):
        assert with_class_archive(f"-Dx=1 {own}", archive) == f"-Dx=1 {own}"


def test_a_configs_driver_options_reach_the_driver_with_the_archive() -> None:
    options = session_conf(conf={DRIVER_JAVA_OPTIONS: "-Dreclock.test=1"})[DRIVER_JAVA_OPTIONS]
    assert options.endswith("-Dreclock.test=1")
    assert (f"-XX:SharedArchiveFile={CLASS_ARCHIVE}" in options) == CLASS_ARCHIVE.is_file()


def test_a_truncated_archive_is_found_damaged_before_it_is_installed(tmp_path: Path) -> None:
    assert maps_cleanly(CLASS_ARCHIVE)
    truncated = tmp_path / "truncated.jsa"
    with CLASS_ARCHIVE.open("rb") as whole:
        truncated.write_bytes(whole.read(CLASS_ARCHIVE.stat().st_size // 2))
    reports = set(Path.cwd().glob("hs_err_pid*.log"))
    assert not maps_cleanly(truncated)
    assert set(Path.cwd().glob("hs_err_pid*.log")) == reports  # the crash report is not left here
