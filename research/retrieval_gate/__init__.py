"""The retrieval gate and the queries none of whose leaves earn reward (`train.gate_learns_from_misses`). See
README.md."""
