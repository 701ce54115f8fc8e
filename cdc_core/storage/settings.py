"""The endpoint and credentials of object-store locations, and what each component that
reaches them is told: the driver's filesystem (pyarrow), delta-rs, Spark's s3a and boto3,
each with the same retry policy (``cdc_core.storage.retries``).

Every component reads the same ``S3Settings``: the config's ``storage`` block over the
standard AWS environment (``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``). A process opens one config's lake at a
time, so the loaded config's block is the process's (``use``); the environment is read
when the settings are used, as the AWS libraries themselves do.

Invariants: plain http is only ever spoken to a loopback endpoint (``InsecureEndpoint``
otherwise); delta-rs commits with a create-only PUT (``If-None-Match: *``), and a setting
that would let it overwrite a commit instead is refused (``UnsafeCommits``), never used.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from cdc_core.network import is_loopback
from cdc_core.storage.retries import RetryPolicy

DEFAULT_REGION = "us-east-1"
# Settings of delta-rs (its object store reads them from the environment too) that trade
# the conditional create of a commit for an unsafe overwrite.
_UNSAFE_DELTA_SETTINGS = {
    "AWS_S3_ALLOW_UNSAFE_RENAME": lambda value: value.lower() in ("1", "true", "yes"),
    "AWS_CONDITIONAL_PUT": lambda value: value.lower() == "disabled",
    "AWS_S3_LOCKING_PROVIDER": lambda value: bool(value),
}
_ENV = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
}


class InsecureEndpoint(ValueError):
    """An ``http://`` endpoint that is not on this machine: credentials and data would
    cross the network unencrypted."""


class UnsafeCommits(ValueError):
    """A setting that makes delta-rs commit without put-if-absent, so two writers could
    both win one version: refused, never used as a fallback."""


@dataclass(frozen=True)
class S3Settings:
    """Where and as whom ``s3://`` locations are reached; None: from the environment."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    retries: RetryPolicy = RetryPolicy()

    def resolved(self, environ: Mapping[str, str] | None = None) -> S3Settings:
        """These settings, each unset one taken from the AWS environment; checked."""
        env = os.environ if environ is None else environ
        filled: dict[str, Any] = {
            field: getattr(self, field) or next((env[n] for n in names if env.get(n)), None)
            for field, names in _ENV.items()
        }
        settings = dataclasses.replace(self, **filled)
        settings.check(env)
        return settings

    def check(self, environ: Mapping[str, str] | None = None) -> None:
        """InsecureEndpoint or UnsafeCommits when these settings (or the environment
        delta-rs also reads) would be unsafe."""
        if self.endpoint is not None:
            parts = urlsplit(self.endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"endpoint must be an http(s)://host[:port] URL "
                                 f"(got {self.endpoint!r})")  # fmt: skip
            if parts.scheme == "http" and not is_loopback(parts.hostname):
                raise InsecureEndpoint(
                    f"endpoint {self.endpoint} is plain http to another machine: use https "
                    "(plain http is allowed for a loopback endpoint only)"
                )
        env = os.environ if environ is None else environ
        unsafe = [f"{name}={env[name]}" for name, bad in _UNSAFE_DELTA_SETTINGS.items()
                  if env.get(name) and bad(env[name])]  # fmt: skip
        if unsafe:
            raise UnsafeCommits(
                f"{', '.join(unsafe)} is set: delta-rs would commit without a conditional "
                "create (If-None-Match), and two writers could both take one version; "
                "unset it (S3 and S3-compatible stores with conditional writes need nothing)"
            )

    @property
    def allows_http(self) -> bool:
        """Whether the endpoint is plain http (only ever a loopback one, see ``check``)."""
        return self.endpoint is not None and self.endpoint.startswith("http://")

    def delta_options(self) -> dict[str, str]:
        """delta-rs ``storage_options``: commits stay create-only PUTs (its default)."""
        options = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region or DEFAULT_REGION,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
            "AWS_ALLOW_HTTP": "true" if self.allows_http else None,
        }
        present = {key: value for key, value in options.items() if value is not None}
        return {**present, **self.retries.delta_options()}

    def spark_conf(self) -> dict[str, str]:
        """``spark.hadoop.fs.s3a.*`` settings: Spark reads and writes ``s3a://`` paths."""
        # Spark writes only new files under a batch folder of its own (``delta_io``), so
        # S3A's checks that a file or folder it creates does not overwrite another (a HEAD
        # and a LIST per file, and per parent on mkdir) are skipped: 29 of a window's 309
        # S3A requests for one source.
        conf = {"fs.s3a.endpoint.region": self.region or DEFAULT_REGION,
                "fs.s3a.performance.flags": "create,mkdir",
                **self.retries.s3a_conf()}  # fmt: skip
        if self.endpoint is not None:
            # A custom endpoint (a store other than AWS's) addresses buckets by path.
            conf["fs.s3a.endpoint"] = self.endpoint
            conf["fs.s3a.path.style.access"] = "true"
            conf["fs.s3a.connection.ssl.enabled"] = str(not self.allows_http).lower()
        if self.access_key_id and self.secret_access_key:
            conf["fs.s3a.access.key"] = self.access_key_id
            conf["fs.s3a.secret.key"] = self.secret_access_key
            provider = "SimpleAWSCredentialsProvider"
            if self.session_token:
                conf["fs.s3a.session.token"] = self.session_token
                provider = "TemporaryAWSCredentialsProvider"
            conf["fs.s3a.aws.credentials.provider"] = f"org.apache.hadoop.fs.s3a.{provider}"
        return {f"spark.hadoop.{key}": value for key, value in conf.items()}

    def filesystem(self) -> pafs.S3FileSystem:
        """The driver's (and a Python worker's) filesystem for ``s3://`` locations."""
        endpoint = urlsplit(self.endpoint) if self.endpoint else None
        return pafs.S3FileSystem(
            access_key=self.access_key_id if self.secret_access_key else None,
            secret_key=self.secret_access_key if self.access_key_id else None,
            session_token=self.session_token,
            region=self.region or DEFAULT_REGION,
            endpoint_override=endpoint.netloc if endpoint else None,
            scheme=endpoint.scheme if endpoint else "https",
            allow_bucket_creation=False,
            allow_bucket_deletion=False,
            # A file smaller than one part is then one PutObject on close, not a
            # multipart upload's three requests (errors come at the first write instead).
            allow_delayed_open=True,
            **self.retries.pyarrow_options(),
        )

    def client(self) -> Any:
        """A boto3 S3 client, for what pyarrow's filesystem cannot ask (a listing that
        starts after a key). boto3 is imported here: only object-store listings need it."""
        import boto3
        from botocore.config import Config as BotoConfig

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region or DEFAULT_REGION,
            aws_access_key_id=self.access_key_id if self.secret_access_key else None,
            aws_secret_access_key=self.secret_access_key if self.access_key_id else None,
            aws_session_token=self.session_token,
            # A custom endpoint (a store other than AWS's) addresses buckets by path.
            config=BotoConfig(
                s3={"addressing_style": "path" if self.endpoint else "auto"},
                **self.retries.botocore_options(),
            ),
        )


_configured = S3Settings()


def use(settings: S3Settings) -> None:
    """Make ``settings`` (a loaded config's ``storage`` block) the process's."""
    global _configured
    _configured = settings


def current() -> S3Settings:
    """The process's settings, resolved against the environment now."""
    return _configured.resolved()
