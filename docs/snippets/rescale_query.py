"""Rescaling a stopped tiered() query (tests/fsstate_spark/tiered/test_rescale.py runs it)."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()

# --8<-- [start:rescale]
from fsstate_spark import rescale_query

rescale_query(spark, "/checkpoints/sessions", 16)  # state_uri=... if tiered() was given one
# --8<-- [end:rescale]
