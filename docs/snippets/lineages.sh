# --8<-- [start:gc]
.venv/bin/fsstate gc s3://my-bucket/fsstate --dry-run      # what would go, deleting nothing
.venv/bin/fsstate gc s3://my-bucket/fsstate --retain 100   # each live lineage's newest 100 versions
# --8<-- [end:gc]
# --8<-- [start:drop]
.venv/bin/fsstate drop-branch s3://my-bucket/fsstate --operator sessions --branch r1201-5f3a9c0e12ab \
  --checkpoint /checkpoints/sessions-test
# --8<-- [end:drop]
# --8<-- [start:repair]
.venv/bin/fsstate-spark repair /checkpoints/sessions --state-uri s3://my-bucket/fsstate          # says what it would do
.venv/bin/fsstate-spark repair /checkpoints/sessions --state-uri s3://my-bucket/fsstate --apply  # rolls the query back
# --8<-- [end:repair]
