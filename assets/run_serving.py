"""One serving of every source a run selects, shared by the run's steps.

The deployment's assets are several multi-assets of a bounded number of sources each
(``assets.deployment``), so a run of many sources has several steps. The sources must
still be served together: registering, binding, reclocking, applying each envelope,
judging the checks and exporting are each one pass for all of them, not one per step.
The job's executor is in-process, so a run's steps run one after another in one process:
the run's first step serves every source the run selects, reports its own and keeps the
others' results here; each later step reports its own from here.

Invariant: each source of a run is served once and reported once, by the step that owns
it. A step whose sources no earlier step of the run served (a selection read differently
from the run's) serves them itself, so no source is ever left unreported.
"""

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from dagster import AssetCheckKey, AssetKey, DagsterRun

from cdc_core.app.materialize import Served

T = TypeVar("T")


@dataclass(frozen=True)
class Selection:
    """Asset and check keys: every one the deployment defines, or those a run selects."""

    assets: frozenset[AssetKey]
    checks: frozenset[AssetCheckKey]

    def of_run(self, run: DagsterRun) -> "Selection":
        """What ``run`` selects of this selection (every key the deployment
        defines), read as Dagster reads a run's selection: no check selection is every
        check on a selected asset, and no asset selection (None, or empty with no check
        selection, as an unsubset in-process run records it) is every asset of the job."""
        every_asset = not run.asset_selection and run.asset_check_selection is None
        assets = self.assets if every_asset else frozenset(run.asset_selection or ())
        if run.asset_check_selection is None:
            checks = frozenset(c for c in self.checks if c.asset_key in assets)
        else:
            checks = frozenset(run.asset_check_selection)
        return Selection(assets & self.assets, checks & self.checks)


class RunServing(Generic[T]):
    """The results a run's first step served for the run's other steps, by run id.

    A run's results live from its first step to the step that takes them, so a process
    that runs many runs (a test session, a code server) keeps none of them; it remembers
    only the ids of the runs it served."""

    def __init__(self) -> None:
        self._kept: dict[str, dict[str, Served[T]]] = {}
        self._served_runs: set[str] = set()

    def keeps(self, run_id: str) -> bool:
        """Whether results of ``run_id`` wait for a later step."""
        return run_id in self._kept

    def for_step(
        self,
        run_id: str,
        own: Iterable[str],
        run_wide: Iterable[str],
        serve: Callable[[list[str]], Iterator[Served[T]]],
    ) -> Iterator[Served[T]]:
        """Each of the step's ``own`` sources, served: on the run's first step, by
        serving every source of ``run_wide`` (keeping the others' results for their
        steps); on a later step, from what the first kept. A source of ``own`` nobody
        served yet is served here."""
        own = list(own)
        first = run_id not in self._served_runs
        self._served_runs.add(run_id)
        kept = self._kept.setdefault(run_id, {})
        waiting = [name for name in own if name not in kept]
        for name in own:
            if name in kept:
                yield kept.pop(name)
        to_serve = [*waiting, *(n for n in run_wide if n not in waiting)] if first else waiting
        try:
            for served in serve(to_serve) if to_serve else iter(()):
                if served.source in waiting:
                    yield served
                else:
                    kept[served.source] = served
        except Exception as failure:
            # What failed the serving fails every source it had not yet given, each
            # reported by its own step.
            for name in to_serve:
                if name not in waiting and name not in kept:
                    kept[name] = Served(name, failure=failure)
            raise
        finally:
            if not kept:
                del self._kept[run_id]
