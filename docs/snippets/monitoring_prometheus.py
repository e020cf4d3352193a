"""The monitoring page: fsstate's figures per batch to a JSON-lines file and to Prometheus."""

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()

# --8<-- [start:listen]
from fsstate_spark.metrics import listen
from fsstate_spark.metrics.prometheus import exporter

prometheus = exporter(port=9464)  # http://127.0.0.1:9464/metrics, served by the driver
listen(spark, "/var/log/fsstate/progress.jsonl", sinks=[prometheus])
# --8<-- [end:listen]
