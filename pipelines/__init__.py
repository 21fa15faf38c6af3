"""Entry points: `mmrag <command>` or `python -m mmrag.pipelines.<command>`."""
