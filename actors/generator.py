"""GeneratorActor: one frozen generator (LVLM or extractive reader) in its own Ray process.

Sits after the reranker in the rollout stream: it answers each leaf of a micro-batch (its
question in the table, the selected evidence) and the answers go on to the reward pool. In the
rollout stream it gets the micro-batch's retrieved hits (resolved here from their reference) and
the selections, and builds each leaf's evidence itself, so passage texts skip the driver. A
pool of `generator.num_replicas` of them shares the leaves; each counts its own busy time,
so benchmarks can compare the end-to-end rate with the pool's own batched rate.
Placed by `mmrag.actors.stage_pools.ActorPools` as `ray.remote(GeneratorActor).options(num_gpus=...)`: a plain
class, so that a benchmark can place a subclass instead (`benchmarks.simulated_device`).
"""

from __future__ import annotations

import time

import ray

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.config import GeneratorConfig
from mmrag.models.generator import build_generator
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.retrieved_rows import leaf_evidence
from mmrag.training.stages import QuestionTable


class GeneratorActor:
    def __init__(self, cfg: GeneratorConfig, cache_dir: str):
        use_actor_cpus("GeneratorActor")
        device = "cuda" if ray.get_gpu_ids() else "cpu"
        self.generator = build_generator(cfg, cache_dir, device)
        self.leaves = 0
        self.seconds = 0.0

    def answer(self, table: QuestionTable, rows: list[int], evidence: list[list[str]]) -> list[str]:
        """One answer per leaf: the generator reads only the leaf's evidence."""
        start = time.perf_counter()
        answers = self.generator.answer(table.images_of(rows), table.questions_of(rows), evidence)
        self.seconds += time.perf_counter() - start
        self.leaves += len(answers)
        return answers

    def answer_selected(self, table: QuestionTable, rows: list[int], hits: list[list[Hit]],
                        selections: list[list[tuple[int, ...]]]) -> list[str]:
        """`answer` with each leaf's evidence the texts of its selection of its query row's hits (`leaf_evidence`)."""
        return self.answer(table, rows, leaf_evidence(hits, selections))

    def throughput(self) -> dict[str, float]:
        """Leaves answered, seconds spent answering, and leaves per second over all calls so far."""
        rate = self.leaves / self.seconds if self.seconds > 0 else 0.0
        return {"leaves": self.leaves, "seconds": self.seconds, "leaves_per_s": rate}
