"""A ``reclock materialize`` that SIGKILLs itself when a named engine phase ends.

    python tests/source/kill_at_phase.py CONFIG SOURCE PHASE

The phase is found through the engine's own announcements (``cdc_core.phases``), so the
kill lands right after that phase's work (e.g. its commit), never at a guessed moment.
Exits 3 if the phase never ended (the test then knows the kill did not happen).
"""

from __future__ import annotations

import os
import signal
import sys

from cdc_core.config import load_config
from cdc_core.phases import PhaseEvent, observing
from pipelines.run import materialize


def main(config_file: str, source: str, phase: str) -> int:
    def kill_after(event: PhaseEvent) -> None:
        if event.ended and event.source == source and event.name == phase:
            os.kill(os.getpid(), signal.SIGKILL)

    with observing(kill_after):
        materialize(load_config(config_file), exports=False)
    return 3


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
