# in a checkout: dist/fsstate-0.1.0-py3-none-any.whl (and dist/fsstate-pyfiles.zip)
make dist
# then, in the driver's and the executors' Python, beside the cluster's PySpark (4.0 to 4.3):
pip install "dist/fsstate-0.1.0-py3-none-any.whl[spark,cli]"
# or straight from the repository (a tag or commit) or from a checkout's directory
pip install "fsstate[spark,cli] @ git+https://github.com/OWNER/fsstate.git@TAG"
pip install "/path/to/fsstate[spark,cli]"
