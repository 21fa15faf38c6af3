"""Cluster helpers: resource plans from a config and the job runtime_env (Ray-free), and `connect`, the one module that starts or joins Ray."""
