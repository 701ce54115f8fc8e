"""The engine's errors that a command reports to its user as a usage error.

Each names something the user can mend (a config that drifted, a shard used wrongly, a
rebuild refused or cut short, a Spark Connect server unreachable or exposed, a catalog
that clashes, does not fit the session or does not answer, an object store that failed a
request past its retries): a front end prints its message and exits with a usage status
instead of a traceback. A run logs each of them, ``STATED_ERRORS``, as one line.
"""

from __future__ import annotations

from cdc_core.catalog import CatalogClash, CatalogUnfit, CatalogUnreachable
from cdc_core.connect_token import ConnectTokenMissing, TokenFileUnsafe
from cdc_core.envelopes import ConfigDriftError
from cdc_core.shard import ShardUsageError
from cdc_core.shard.leases import LeaseUsageError
from cdc_core.source import RebuildRefused, RebuildUnfinished
from cdc_core.spark import ConnectRefused
from cdc_core.spark_server import ExposedServer
from cdc_core.storage import StorageFailure

USAGE_ERRORS: tuple[type[Exception], ...] = (
    ShardUsageError,
    LeaseUsageError,
    KeyError,
    ConfigDriftError,
    RebuildRefused,
    RebuildUnfinished,
    ConnectTokenMissing,
    TokenFileUnsafe,
    ConnectRefused,
    ExposedServer,
    CatalogClash,
    CatalogUnfit,
    CatalogUnreachable,
    StorageFailure,
)

# The usage errors whose message alone says what failed and where (the operation and
# object, the table, the source): a run states them in one line, without a trace. A bare
# KeyError is left out: in a run it is more likely a fault than an unknown name.
STATED_ERRORS: tuple[type[Exception], ...] = tuple(e for e in USAGE_ERRORS if e is not KeyError)
