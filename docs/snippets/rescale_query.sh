.venv/bin/fsstate-spark rescale /checkpoints/sessions 16               # where the driver runs
.venv/bin/fsstate-spark rescale /checkpoints/sessions 16 --state-uri s3://my-bucket/fsstate \
  -o region=eu-west-1 --conf spark.sql.shuffle.partitions=16
