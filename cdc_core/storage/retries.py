"""One retry policy for every client of an object store: Spark's s3a, delta-rs, pyarrow, boto3.

A request to the store is tried at most ``attempts`` times, each try bounded by
``request_timeout_ms``, with exponential backoff between tries starting at
``base_backoff_ms`` and capped at ``max_backoff_ms`` where the client lets it be set.
``deadline_ms`` is the longest a request may take, every retry included: a store that
stays down fails the request, and so the run making it, within it (once the tries are
spent, which against a store refusing connections takes only the backoffs).

Why a bound rather than a clock: only delta-rs (object_store's ``retry_timeout``) stops
retrying by elapsed time; the others count tries. So the policy itself is refused
(``RetryPolicyTooSlow``) when the longest a request can take in any client, its tries
and the backoffs between them (``worst_case_ms``), exceeds the deadline: every client then
gives up within it, whatever the store does.

Invariant: the four clients are told the same number of tries and the same timeouts; where
a client cannot honour a setting (backoff in s3a, boto3 and pyarrow, a read timeout in
pyarrow on Linux, a timeout under 15 s in s3a) its own behaviour is counted in the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

# The AWS SDKs' standard retry strategy (boto3's, pyarrow's C++ SDK, s3a's Java SDK v2):
# full jitter over min(20 s, 1 s * 2**i) after a throttled try (less after any other);
# not settable through botocore's Config, pyarrow's S3FileSystem nor s3a's settings.
_SDK_THROTTLE_BASE_MS = 1000
_SDK_MAX_BACKOFF_MS = 20_000
# Hadoop's S3A raises a connection, socket or request timeout below this to it
# (Constants.MINIMUM_NETWORK_OPERATION_DURATION, hadoop-aws 3.5.0).
_S3A_SHORTEST_TIMEOUT_MS = 15_000


class RetryPolicyTooSlow(ValueError):
    """A retry policy whose tries and backoffs could outlast its deadline."""


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a request to an object store is tried (see the module)."""

    attempts: int = 5
    base_backoff_ms: int = 100
    max_backoff_ms: int = 5_000
    request_timeout_ms: int = 20_000
    deadline_ms: int = 180_000

    def check(self) -> None:
        """ValueError for settings out of range, RetryPolicyTooSlow when the worst case
        of a request outlasts the deadline."""
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1 (got {self.attempts})")
        if self.base_backoff_ms > self.max_backoff_ms:
            raise ValueError(
                f"base_backoff ({self.base_backoff_ms} ms) exceeds max_backoff "
                f"({self.max_backoff_ms} ms)"
            )
        if self.worst_case_ms > self.deadline_ms:
            raise RetryPolicyTooSlow(
                f"{self.attempts} attempts of up to {self.request_timeout_ms} ms each, with "
                f"backoff between them, can take {self.worst_case_ms} ms, longer than the "
                f"deadline ({self.deadline_ms} ms): lower attempts or request_timeout, or "
                "raise deadline"
            )

    @property
    def retries(self) -> int:
        """The tries after the first."""
        return self.attempts - 1

    @property
    def worst_case_ms(self) -> int:
        """The longest one request can take in any client: every try timing out (s3a's
        after 15 s at the least: Hadoop raises shorter connection timeouts to that), and
        the longest backoff any client waits before each retry (the AWS SDKs' standard
        strategy, under s3a, boto3 and pyarrow: up to 1 s doubled per retry, at most 20 s;
        delta-rs: its own backoff, capped at ``max_backoff_ms``)."""
        backoffs = sum(
            max(min(self.max_backoff_ms, self.base_backoff_ms << retry),
                min(_SDK_MAX_BACKOFF_MS, _SDK_THROTTLE_BASE_MS << retry))
            for retry in range(self.retries)
        )  # fmt: skip
        return self.attempts * max(self.request_timeout_ms, _S3A_SHORTEST_TIMEOUT_MS) + backoffs

    def delta_options(self) -> dict[str, str]:
        """delta-rs ``storage_options`` (object_store's retry and client settings)."""
        return {
            "max_retries": str(self.retries),
            "retry_timeout": _duration(self.deadline_ms),
            "backoff_config.init_backoff": _duration(self.base_backoff_ms),
            "backoff_config.max_backoff": _duration(self.max_backoff_ms),
            "backoff_config.base": "2",
            "connect_timeout": _duration(self.request_timeout_ms),
            "timeout": _duration(self.request_timeout_ms),
        }

    def s3a_conf(self) -> dict[str, str]:
        """Hadoop ``fs.s3a.*`` settings: the AWS SDK under S3A retries (it sits under every
        request, the analytics accelerator's read stream included, which S3A's own retry
        layer does not wrap), and S3A's layer does not retry on top, so tries do not
        multiply."""
        return {
            "fs.s3a.attempts.maximum": str(self.retries),
            "fs.s3a.retry.limit": "0",
            "fs.s3a.retry.throttle.limit": "0",
            "fs.s3a.connection.establish.timeout": f"{self.request_timeout_ms}ms",
            "fs.s3a.connection.timeout": f"{self.request_timeout_ms}ms",
            "fs.s3a.connection.request.timeout": f"{self.request_timeout_ms}ms",
        }

    def pyarrow_options(self) -> dict[str, Any]:
        """``pyarrow.fs.S3FileSystem`` keyword arguments."""
        return {
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=self.attempts),
            "connect_timeout": self.request_timeout_ms / 1000,
            "request_timeout": self.request_timeout_ms / 1000,
        }

    def botocore_options(self) -> dict[str, Any]:
        """``botocore.config.Config`` keyword arguments (standard retry mode)."""
        return {
            "retries": {"mode": "standard", "total_max_attempts": self.attempts},
            "connect_timeout": self.request_timeout_ms / 1000,
            "read_timeout": self.request_timeout_ms / 1000,
        }


def _duration(ms: int) -> str:
    """A duration as object_store parses it (humantime: ``1500ms``, ``3s``)."""
    return f"{ms}ms"
