"""Hypothesis settings of the property tests whose every example runs Spark jobs.

Such an example costs seconds, not microseconds, so these tests draw a few examples each
(their own ``max_examples``) where the pure-Python properties draw hundreds. The few are
drawn from a fixed seed (``derandomize``): every run, in CI or on a laptop, checks the
same examples, so a failure seen once is seen again, and shrinking still reduces it to a
minimal case. Function-scoped fixtures (the session-wide ``spark``) and slow data
generation are expected here, not faults of the test.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

SPARK_EXAMPLES = settings(
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
