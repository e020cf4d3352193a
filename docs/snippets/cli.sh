fsstate list   state                          # operators, partitions, committed versions
fsstate stats  state --live-rows              # per state variable: kind, files, rows, bytes
fsstate show   state sessions count -v 1      # a table at a version, across its partitions
fsstate diff   state sessions count 0 1       # what changed: change_type update / delete
fsstate verify state                          # checksums of every retained file
fsstate branches state                        # other lineages (copied, restored, rolled back)
fsstate gc     state --retain 10              # unreferenced files past the grace time, old versions
fsstate --json stats state                    # one JSON document, for scripts
