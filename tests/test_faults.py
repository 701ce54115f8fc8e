"""A run killed (SIGKILL) right after any phase of the engine, then run again, leaves
exactly the tables of a run that was never killed.

Each phase is found by the engine's phase announcements (``cdc_core.phases``): the kill
lands after that phase's commit and before the next one starts. Between every pair of
commits there is a phase end, so every crash point between commits is covered.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from cdc_core.config import Config, load_config
from cdc_core.pipeline import OUTPUTS
from pipelines.cli import materialize
from pipelines.sample import write_sample

SOURCE = "users"
PHASES = (
    "register dumps",
    "bind windows",
    "append reclocked",
    "plan envelope",
    "append changes",
    "append errors",
    "publish state",
)


def one_source_sample(workdir: Path) -> Path:
    """The bundled sample, with only its upsert source configured (a shorter run)."""
    config_file = write_sample(workdir)
    settings = yaml.safe_load(config_file.read_text())
    settings["sources"] = [s for s in settings["sources"] if s["name"] == SOURCE]
    config_file.write_text(yaml.safe_dump(settings, sort_keys=False))
    return config_file


def contents(config: Config) -> dict[str, Counter]:
    """Every table's rows, with the run's own folder (in error file names) left out."""
    root = str(config.lake.parent)

    def portable(value: object) -> object:
        return value.replace(root, "<root>") if isinstance(value, str) else value

    return {
        table: Counter(
            tuple((name, portable(value)) for name, value in sorted(row.items()))
            for row in DeltaTable(str(config.lake / SOURCE / table)).to_pyarrow_table().to_pylist()
        )
        for table in OUTPUTS
    }


@pytest.fixture(scope="module")
def never_killed(tmp_path_factory: pytest.TempPathFactory, spark) -> dict[str, Counter]:
    config = load_config(one_source_sample(tmp_path_factory.mktemp("clean")))
    assert materialize(config, exports=False)
    return contents(config)


@pytest.mark.parametrize("phase", PHASES)
def test_a_run_killed_after_a_phase_then_rerun_equals_a_clean_run(
    phase: str, never_killed: dict[str, Counter], tmp_path: Path
) -> None:
    config_file = one_source_sample(tmp_path)
    script = Path(__file__).with_name("kill_at_phase.py")
    killed = subprocess.run(
        [sys.executable, str(script), str(config_file), SOURCE, phase],
        capture_output=True, text=True, timeout=600, cwd=Path(__file__).parent.parent,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    config = load_config(config_file)
    assert materialize(config, exports=False)
    assert contents(config) == never_killed
