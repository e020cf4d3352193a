# --8<-- [start:watch]
.venv/bin/fsstate-spark watch /checkpoints/sessions                 # redrawn every 5 s
.venv/bin/fsstate-spark watch /checkpoints/sessions --once --json   # one document, for scripts
.venv/bin/fsstate-spark watch s3://my-bucket/fsstate --interval 30 -o region=eu-west-1
# --8<-- [end:watch]
# --8<-- [start:history]
.venv/bin/fsstate stats s3://my-bucket/fsstate --history 20
# --8<-- [end:history]
# --8<-- [start:chart]
make monitoring-chart
# --8<-- [end:chart]
