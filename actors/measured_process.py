"""An actor that runs one job in a process of its own and reports that process's peak RSS.

`mmrag.actors.index_build.RayRunner` runs each shard writer of the index build in one: an actor
always gets a fresh worker process (a task may land in a reused one, whose peak RSS
would include its earlier work), and this module imports nothing heavy, so the figure
is the job's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from mmrag.retrieval.build_report import peak_rss_mb


@ray.remote(max_restarts=0)
class MeasuredProcess:
    def run(self, job: Callable[[], Any]) -> tuple[Any, float]:
        """`job()` and the peak RSS (MiB) of this process once it returned."""
        return job(), peak_rss_mb()
