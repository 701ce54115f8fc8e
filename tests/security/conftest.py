"""The S3-protocol server and bucket of the storage tests, for the object-store cases."""

from tests.storage.conftest import s3_bucket, s3_endpoint

__all__ = ["s3_bucket", "s3_endpoint"]
