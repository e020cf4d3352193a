# beside the cluster's own PySpark (4.0 to 4.3); pyarrow, numpy, pandas, obstore come with it
pip install "fsstate[spark]"
# and the fsstate / fsstate-spark commands
pip install "fsstate[spark,cli]"
