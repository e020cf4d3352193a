.venv/bin/fsstate-spark fork /checkpoints/sessions /checkpoints/sessions-test --batch 1200
.venv/bin/fsstate-spark rollback /checkpoints/sessions --batch 1200   # the query stopped
.venv/bin/fsstate verify s3://my-bucket/fsstate --checkpoint /checkpoints/sessions
