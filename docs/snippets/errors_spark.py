"""The errors Spark's state handles raise, imported from fsstate_spark: fsstate errors too."""

from pyspark.errors import PySparkRuntimeError

from fsstate.errors import FsStateError

# --8<-- [start:spark]
from fsstate_spark import DeletedStateError, EmptyListError, NoGroupingKeyError, TimerModeError

# --8<-- [end:spark]
for error in (NoGroupingKeyError, EmptyListError, TimerModeError, DeletedStateError):
    assert issubclass(error, FsStateError)
assert issubclass(DeletedStateError, PySparkRuntimeError)
assert issubclass(TimerModeError, RuntimeError) and issubclass(EmptyListError, ValueError)
