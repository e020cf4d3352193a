.venv/bin/fsstate list  running_count/state                      # queries, operators, versions
.venv/bin/fsstate stats running_count/state --live-rows          # per state: files, rows, bytes
