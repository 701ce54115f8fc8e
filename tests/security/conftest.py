"""The S3-protocol test server of the storage tests, for the security tests too."""

from tests.storage.conftest import s3_bucket, s3_endpoint

__all__ = ["s3_bucket", "s3_endpoint"]
