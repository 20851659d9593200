"""Redis storage: plain Redis 6.2+ or Valkey, single server or cluster, no modules (needs ``redis``).

Every primitive is one Lua script, atomic on the server; on plain Redis a save (nested records,
location pointers and indexes included), a load, a latest, a listing of ids, a delete, a prune
and an ancestry walk are each exactly one round trip. The package's parts:

* ``config``: options, URL parsing and validation;
* ``client``: the handle's redis-py client, the event loop it follows, script calls, driver-error
  translation, the eviction-policy check;
* ``keys``: the key layout (hash tags keep every key of one workflow in one cluster slot);
* ``scripts`` and ``scripts/*.lua``: the Lua scripts and their typed calls; ``replies``: what
  they return, decoded;
* ``commit``: how a save, prune or delete is made atomic; ``cluster``: the cross-slot half of
  every write on a Redis Cluster; ``workflows``: the per-prefix workflow index listings read
  instead of SCAN;
* ``reads``: the read primitives, which never write and never answer with an older checkpoint or
  a shorter list when a record is lost;
* ``storage``: :class:`RedisCheckpointStorage`, wiring them into the contract's primitives.

docs/redis.md describes the layout, each operation and what it costs.
"""

from .backend import RedisBackend
from .client import delete_prefix
from .config import (
    CONNECTION_WAIT_SECONDS,
    DEFAULT_PREFIX,
    MAX_CONNECTIONS,
    RETRIES,
    url_option_names,
    url_options,
)
from .config import driver_url as _driver_url  # noqa: F401 - imported from here by tests
from .driver import WaitingConnectionPool
from .keys import RedisKeys, escape, unescape
from .reads import PAGE_SIZE
from .scripts import script_sha
from .storage import RedisCheckpointStorage

__all__ = [
    "CONNECTION_WAIT_SECONDS",
    "DEFAULT_PREFIX",
    "MAX_CONNECTIONS",
    "PAGE_SIZE",
    "RETRIES",
    "RedisBackend",
    "RedisCheckpointStorage",
    "RedisKeys",
    "WaitingConnectionPool",
    "delete_prefix",
    "escape",
    "script_sha",
    "unescape",
    "url_option_names",
    "url_options",
]
