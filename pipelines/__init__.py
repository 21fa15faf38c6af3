"""Entry points: `mmrag <command>` or `python -m pipelines.<command>`."""
