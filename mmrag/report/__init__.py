"""The evolution report of a training run (Ray-free; `mmrag report RUN_DIR` drives it)."""
