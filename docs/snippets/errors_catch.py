"""fsstate's errors: one root, typed subclasses that also derive from the matching builtin."""

from fsstate import PartitionStore, StoreConfig

# --8<-- [start:catch]
from fsstate.errors import ConfigError, FsStateError, VersionNotFoundError

try:
    StoreConfig(retain_versions=0)
except ConfigError as exc:  # also a ValueError
    print(exc)  # retain_versions=0 must be an integer >= 1

try:
    PartitionStore.open("state", operator="sessions", partition=0, version=41)
except VersionNotFoundError as exc:  # never committed, or no longer retained
    print(exc)
except FsStateError:  # every error fsstate raises on purpose
    raise
# --8<-- [end:catch]
