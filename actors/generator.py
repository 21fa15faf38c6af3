"""GeneratorActor: one frozen generator (LVLM or extractive reader) in its own Ray process.

Sits after the reranker in the rollout loop: the driver sends batches of leaves
(image, question, selected evidence) here and passes the answers to the reward actors.
A pool of `generator.num_replicas` of them shares the leaves; each reports its own
throughput so the driver can log where rollout time goes.
The caller places it, e.g. `GeneratorActor.options(num_gpus=cfg.generator.num_gpus).remote(...)`.
"""

from __future__ import annotations

import time

import ray
from PIL import Image

from mmrag.config import GeneratorConfig


@ray.remote
class GeneratorActor:
    def __init__(self, cfg: GeneratorConfig, cache_dir: str):
        from mmrag.models.generator import build_generator

        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.generator = build_generator(cfg, cache_dir, device)
        self.leaves = 0
        self.seconds = 0.0

    def answer(self, images: list[Image.Image | None], questions: list[str], evidence: list[list[str]]) -> list[str]:
        """One answer per leaf."""
        start = time.perf_counter()
        answers = self.generator.answer(images, questions, evidence)
        self.seconds += time.perf_counter() - start
        self.leaves += len(answers)
        return answers

    def throughput(self) -> dict[str, float]:
        """Leaves answered, seconds spent answering, and leaves per second over all calls so far."""
        rate = self.leaves / self.seconds if self.seconds > 0 else 0.0
        return {"leaves": self.leaves, "seconds": self.seconds, "leaves_per_s": rate}
