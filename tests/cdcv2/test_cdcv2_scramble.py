"""The stream mangler the CDCv2 tests share: duplication, reordering and re-batching
of updates, and a second, differently cut tiling of the same progress facts.

Written independently of the exporter (its own cutting of intervals) so that the
properties do not test the code against itself."""

from __future__ import annotations

import random
from collections import Counter

from cdc_core.cdcv2.model import Message, Progress, Update, Updates
from cdc_core.frontier import TimeFrontier


def rebatch(items: list, rng: random.Random, largest: int = 4) -> list[list]:
    """Cut ``items`` into consecutive batches of random sizes (1..largest)."""
    batches, position = [], 0
    while position < len(items):
        size = rng.randint(1, largest)
        batches.append(items[position : position + size])
        position += size
    return batches


def retile(statements: list[Progress], rng: random.Random) -> list[Progress]:
    """The same progress facts as a contiguous chain, cut at random other points.
    ``statements`` must tile one interval contiguously."""
    ordered = sorted(statements, key=lambda p: p.lower.time)
    lower, upper = ordered[0].lower.time, ordered[-1].upper
    counts = {t: c for p in ordered for t, c in p.counts}
    last = upper.time if upper.time is not None else max([lower, *counts]) + 2
    cuts = sorted({rng.randint(lower, last) for _ in range(rng.randint(0, 3))} - {lower, last})
    bounds = [TimeFrontier.at(t) for t in [lower, *cuts]] + [upper]
    pieces = []
    for start, end in zip(bounds, bounds[1:], strict=False):
        inside = [
            (t, c) for t, c in counts.items() if start.less_equal(t) and not end.less_equal(t)
        ]
        pieces.append(Progress(start, end, tuple(inside)))
    return pieces


def scramble(
    updates: list[Update], statements: list[Progress], rng: random.Random
) -> list[Message]:
    """Duplicate, reorder and re-batch the updates; mix the statements with a second
    tiling of the same facts and with copies; shuffle everything together."""
    copies = [u for u in updates for _ in range(rng.randint(1, 3))]
    rng.shuffle(copies)
    messages: list[Message] = [Updates(tuple(batch)) for batch in rebatch(copies, rng)]
    if statements:
        messages += statements + retile(statements, rng)
        messages += rng.choices(statements, k=rng.randint(0, 2))
    rng.shuffle(messages)
    return messages


def test_scramble_keeps_every_fact_and_adds_only_copies() -> None:
    rng = random.Random(7)
    updates = [((i, "x"), i % 3, 1) for i in range(10)]
    statements = [
        Progress(TimeFrontier.at(0), TimeFrontier.at(2), ((0, 4), (1, 3))),
        Progress(TimeFrontier.at(2), TimeFrontier.empty(), ((2, 3),)),
    ]
    messages = scramble(updates, statements, rng)
    received = [u for m in messages if isinstance(m, Updates) for u in m.updates]
    assert set(received) == set(updates)
    assert all(1 <= n <= 3 for n in Counter(received).values())
    tilings = [m for m in messages if isinstance(m, Progress)]
    assert {t: c for p in tilings for t, c in p.counts} == {0: 4, 1: 3, 2: 3}
