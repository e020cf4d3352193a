# fsstate installed on every executor (a wheel in their environment, or spark.archives):
spark-submit \
  --conf spark.python.worker.module=pyspark_fsstate.worker \
  --conf spark.fsstate.stateUri=s3://my-bucket/fsstate \
  --conf spark.fsstate.memoryLimit=512MiB \
  my_job.py

# without installing it on the executors: the zip of fsstate and fsstate_spark, no keyed loop
make dist   # builds dist/fsstate-pyfiles.zip
spark-submit --py-files dist/fsstate-pyfiles.zip my_job.py
