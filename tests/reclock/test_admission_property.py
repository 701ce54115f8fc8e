"""Property, at full strength and without Spark: the driver's admission over a run's
summaries (runs of records, ENDs with the window that first knows them) binds every
window exactly as the plain-Python oracle of the admission rule says. The Spark-backed
property test checks the same logs end to end on fewer examples."""

from __future__ import annotations

from hypothesis import given, settings

from cdc_core.frontier import OffsetFrontier
from cdc_core.reclock.admission import TRANSACTION_TOPIC, Admission, End, Run
from tests.reclock.test_transactions_property import (
    MEMBERS,
    T0,
    TXN,
    WINDOWS,
    Rec,
    W,
    event_time_frontier,
    logs,
    oracle,
)

ENDS = [T0 + window * W for window in range(1, WINDOWS + 1)]


def proposals(log: list[Rec]) -> list[dict[str, OffsetFrontier]]:
    """Each member's event-time frontier at each window end."""
    return [
        {m: OffsetFrontier(event_time_frontier([r for r in log if r.member == m], end))
         for m in MEMBERS}
        for end in ENDS
    ]  # fmt: skip


def summaries(log: list[Rec], proposed: list[dict[str, OffsetFrontier]]) -> Admission:
    """The summaries of one run over every window: what the Spark side gathers."""
    txn = [r for r in log if r.member == TXN]
    ends = []
    for r in txn:
        known = [e for e in ENDS if r.offset < event_time_frontier(txn, e).get(0, 0)]
        if known:
            ends.append(End(r.partition, r.offset, r.txid, known[0], dict(r.end), False))
    runs: list[Run] = []
    previous: tuple[str, int, str, int] | None = None
    ordered = sorted((r for r in log if r.member in MEMBERS and r.txid is not None),
                     key=lambda r: (r.member, r.partition, r.offset))  # fmt: skip
    for r in ordered:
        covered = [i for i, p in enumerate(proposed) if r.offset < p[r.member][r.partition]]
        if not covered:
            continue
        key = (r.member, r.partition, r.txid, covered[0])
        if key == previous:
            last = runs.pop()
            runs.append(Run(last.member, last.partition, last.first, last.txid, last.count + 1))
        else:
            runs.append(Run(r.member, r.partition, r.offset, r.txid, 1))
        previous = key
    return Admission(list(MEMBERS), runs, ends)


@settings(max_examples=400, deadline=None)
@given(log=logs())
def test_admission_over_summaries_binds_as_the_rule_says(log: list[Rec]) -> None:
    proposed = proposals(log)
    admission = summaries(log, proposed)
    bound: dict[str, OffsetFrontier] = {TRANSACTION_TOPIC: OffsetFrontier()}
    result = []
    for end, proposal in zip(ENDS, proposed, strict=True):
        bound = admission.admit(bound, proposal, end)
        result.append({m: {p: o for p, o in bound[m].offsets.items() if o} for m in MEMBERS})
    assert result == oracle(log)
