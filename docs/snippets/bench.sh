make bench-quick                      # a smaller run of every suite (minutes)
make bench                            # the full run the published figures come from
make bench-report                     # docs/benchmarks.md again from bench/results/*.json
.venv/bin/python -m bench.run --quick --suite spark_driver   # one suite
.venv/bin/python -m bench.profile --list                     # the profiled engine calls
