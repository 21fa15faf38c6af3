"""Data: the internal Parquet format (dataset.py) and the synthetic KB-VQA world that fills it (world, render, synth)."""
