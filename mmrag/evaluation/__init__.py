"""Evaluation of a trained pipeline against reference settings (Ray-free; `mmrag eval` drives it)."""
