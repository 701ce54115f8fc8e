"""The shard handle: the write, read and maintenance roles on one loaded log version.

The roles live in their own modules (``write``, ``read``, ``maintenance``) over a shared
``handle``; a pipeline step usually needs several of them on the same version (append,
then read back what it wrote), so ``Shard`` combines them, as a persist client hands
out its write and read handles on one shard.
"""

from __future__ import annotations

from cdc_core.shard.maintenance import ShardMaintainer
from cdc_core.shard.read import ShardReader
from cdc_core.shard.write import ShardWriter


class Shard(ShardWriter, ShardReader, ShardMaintainer):
    """Handle on one shard; cheap to create, re-reads the Delta log on ``refresh``.

    Reads use the version the handle last loaded, so frontiers and contents always come
    from the same version; writes re-read the log as the protocol requires.
    """
