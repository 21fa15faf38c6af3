"""Cluster helpers: resource plans from a config, the job runtime_env; Ray-free."""
