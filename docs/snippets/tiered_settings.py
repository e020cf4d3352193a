"""tiered()'s settings: arguments first, then spark.fsstate.* settings, then defaults."""

from examples.running_count import RunningCount

# --8<-- [start:settings]
from fsstate_spark import tiered

processor = tiered(
    RunningCount(),
    state_uri="fsstate_state",  # a local directory, or s3://bucket/prefix on a cluster
    memory_limit="256MiB",  # the engine's budget in each Python worker
    name="word_counts",  # the state's name in the query (default: the class name)
    retain_versions=20,  # a StoreConfig setting: versions kept restorable
    high_watermark=0.8,  # an EngineConfig setting: when the budget starts reclaiming
)
print(processor.config.memory_limit_bytes, processor.config.store.retain_versions)
# --8<-- [end:settings]
assert processor.config.memory_limit_bytes == 256 * 1024 * 1024
