"""The index build on Ray: KB parts read by Ray Data, embedded by a pool of encoder actors, shards written by tasks.

`RayRunner` is the `BuildRunner` that `mmrag index` hands to
`mmrag.retrieval.build.build_index` unless `--local` is given:

* Embedding: `ray.data.read_datasource(KBPartsDatasource)` has one read task per pending
  KB part (`mmrag.actors.kb_datasource`), and `map_batches(PartEmbedder)` runs them through
  `index.num_workers` encoder actors (`index.worker_num_cpus` CPUs and `encoder.num_gpus`
  GPUs each), one batch per part. Each actor persists its parts itself, so only a one-row
  summary per part comes back to the driver, and Ray Data's streaming backpressure keeps a
  few parts in flight, whatever the size of the KB.
* FAISS stage: the doc-store writer and each shard's index writer run in parallel, each
  in a `MeasuredProcess` actor of its own that reports its peak RSS.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import ray
from ray.util.annotations import RayDeprecationWarning
from tqdm import tqdm

from mmrag.actors.kb_datasource import KBPartsDatasource
from mmrag.actors.measured_process import MeasuredProcess
from mmrag.cluster.connect import connect
from mmrag.retrieval.build import EmbedJob
from mmrag.retrieval.kb_parts import KBPart
from mmrag.retrieval.part_embedder import PartEmbedder


class RayRunner:
    """Runs the build's stages on Ray, joining (or starting) it only when there is work for it.

    Uses the Ray this process is connected to; otherwise `mmrag.cluster.connect.connect(address,
    num_cpus)`, undone by `close`. A no-op build never starts Ray.
    """

    def __init__(self, num_workers: int, worker_num_cpus: float, worker_num_gpus: float, address: str = "",
                 num_cpus: int | None = None, progress: bool = False) -> None:
        self.workers, self.num_cpus, self.num_gpus = num_workers, worker_num_cpus, worker_num_gpus
        self.address, self.cluster_cpus, self.progress = address, num_cpus, progress
        self.connected = False

    def _connect(self) -> None:
        self.connected = connect(self.address, self.cluster_cpus) or self.connected

    def close(self) -> None:
        """Disconnect from Ray if this runner connected."""
        if self.connected:
            ray.shutdown()
            self.connected = False

    def embed(self, job: EmbedJob, parts: list[KBPart]) -> Iterator[dict]:
        if not parts:
            return
        self._connect()
        # build_index shows one bar over rows; Ray Data would warn that its own bars are off.
        ray.data.DataContext.get_current().enable_progress_bars = False
        logging.getLogger("ray.data._internal.progress").setLevel(logging.ERROR)
        device = "cuda" if self.num_gpus > 0 else "cpu"
        # One block per part: without override_num_blocks Ray Data splits each read into many small blocks.
        parts_read = ray.data.read_datasource(KBPartsDatasource(job.kb, parts, job.doc_id_problems),
                                              override_num_blocks=len(parts))
        with warnings.catch_warnings():
            # max_restarts=0: a lost encoder actor fails the build, which a rerun resumes from the persisted
            # parts. Ray's default (restart forever) also logs a misleading error about constructor arguments
            # at start-up. Ray 2.60 deprecates such actor options as keyword arguments but has no named one.
            warnings.simplefilter("ignore", RayDeprecationWarning)
            summaries = parts_read.map_batches(
                PartEmbedder, fn_constructor_kwargs={**job.embedder_args, "device": device}, batch_size=None,
                batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=min(self.workers, len(parts))),
                num_cpus=self.num_cpus, num_gpus=self.num_gpus, max_restarts=0)
        for summary in summaries.iter_rows():
            yield dict(summary)

    def run(self, jobs: list[Callable[[], Any]]) -> list[tuple[Any, float]]:
        self._connect()
        processes = [MeasuredProcess.options(num_cpus=self.num_cpus).remote() for _ in jobs]
        refs = [process.run.remote(job) for process, job in zip(processes, jobs)]
        pending = list(refs)
        try:
            with tqdm(total=len(refs), desc="writing shards", unit="file", disable=not self.progress) as bar:
                while pending:
                    finished, pending = ray.wait(pending, num_returns=1)
                    ray.get(finished)  # an error in any writer surfaces now
                    bar.update(len(finished))
            return ray.get(refs)
        finally:
            for process in processes:
                ray.kill(process)
