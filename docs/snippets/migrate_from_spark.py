"""Moving a query from Spark's own state (RocksDB) to fsstate: Spark's state as initialState.

The processor (Basket: a value ``total``, a list ``recent``, a map ``counts`` per key ``k``)
rebuilds its state in handleInitialState from one row per value, list and map entry.
tests/fsstate_spark/tiered/test_migration.py runs this recipe end to end.
"""

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from fsstate_spark import tiered

spark = SparkSession.builder.getOrCreate()
old_checkpoint, last_batch = "/checkpoints/basket", 41
new_input = spark.readStream.schema("k STRING, item STRING, v BIGINT").json("/data/basket")
Basket, output_schema = ..., "k STRING, total BIGINT, recent STRING, counts STRING"


# --8<-- [start:migrate]
def read(var, flatten=True):
    return (
        spark.read.format("statestore")  # Spark's own state reader
        .option("path", old_checkpoint)
        .option("batchId", last_batch)
        .option("stateVarName", var)
        .option("flattenCollectionTypes", str(flatten).lower())
        .load()
    )


none = F.lit(None)
init = (
    read("total").select(
        "key.k", F.lit("total").alias("var"), "value.total",
        none.cast("array<string>").alias("recent"), none.cast("string").alias("item"),
        none.cast("bigint").alias("n"),
    )
    .unionByName(read("recent", flatten=False).select(  # a list in its order: unflattened
        "key.k", F.lit("recent").alias("var"), none.cast("bigint").alias("total"),
        F.transform("list_value", lambda e: e["item"]).alias("recent"),
        none.cast("string").alias("item"), none.cast("bigint").alias("n"),
    ))
    .unionByName(read("counts").select(  # one row per map entry
        "key.k", F.lit("counts").alias("var"), none.cast("bigint").alias("total"),
        none.cast("array<string>").alias("recent"), "user_map_key.item", "user_map_value.n",
    ))
)  # fmt: skip
query = new_input.groupBy("k").transformWithStateInPandas(
    tiered(Basket()), output_schema, "Update", "None", initialState=init.groupBy("k")
)  # with a new checkpoint, its input starting where the old query stopped
# --8<-- [end:migrate]
