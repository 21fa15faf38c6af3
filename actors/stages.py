"""ActorPools: the pipeline's stages on pools of Ray actors, for the streaming rollout and for evaluation.

One `ReplicaPool` per stage: translator replicas, encoder replicas, one pool per retrieval
shard, reranker replicas, the generator pool and the reward pool. `submit` starts one stage
call on a micro-batch and returns a future; `wait` blocks until some finish, re-dispatching
calls whose replica died. A micro-batch's `QuestionTable` is put in the object store once
(`share`) and every call takes that reference, so images never pass through the driver
again; retrieval chains the encoder's output straight into the shards' searches and merges
their top-K on the driver. The blocking `Stages` methods (evaluation) run the same calls.
Policy calls carry the weights version installed last (`install`), so every replica samples
with the version the driver asks for, including one Ray has just restarted.
"""

from __future__ import annotations

import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from actors.encoder import EncoderActor
from actors.generator import GeneratorActor
from actors.placement import StagePlacement
from actors.policy import PolicyWeights
from actors.pool import Call, ReplicaPool
from actors.reranker import RerankerActor
from actors.retrieval import RetrievalRouter
from actors.reward import RewardActor
from actors.translator import TranslatorActor
from mmrag.config import Config
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.merge import merge_topk
from mmrag.training.device_time import DeviceTime
from mmrag.training.learner import Weights
from mmrag.training.stages import QuestionTable
from mmrag.training.streaming import StageFailed

STARTUP_TIMEOUT_S = 600.0
"""How long an actor may take to be placed and load its model before the run fails naming it."""


class RetrievalCall:
    """Encode the queries on an encoder replica, search every shard with the vectors, merge the top-K."""

    def __init__(self, encoders: ReplicaPool, shards: list[ReplicaPool], queries: list[str], k: int):
        self.shards, self.k = shards, k
        self.encode = encoders.call("encode_texts", queries, finish=lambda vectors: None)
        self.searches = self._searches()
        self.value: list[list[Hit]] | None = None
        self.error: str | None = None
        self.done = False

    def _searches(self) -> list[Call]:
        return [pool.call("search", self.encode.refs[0], self.k) for pool in self.shards]

    @property
    def refs(self) -> list:
        pending = [] if self.encode.done else self.encode.refs
        return pending + [ref for call in self.searches if not call.done for ref in call.refs]

    def settle(self, ready: set) -> None:
        if not self.encode.done and self.encode.refs[0] in ready:
            attempts = self.encode.attempts
            self.encode.settle()
            if self.encode.attempts > attempts:  # the encoder died: the searches wait on lost vectors
                for call in self.searches:
                    call.pool.in_flight[call.replica] -= 1
                self.searches = self._searches()
                return
        for call in self.searches:
            if not call.done and call.refs[0] in ready:
                call.settle()
        failed = [c.error for c in [self.encode, *self.searches] if c.done and c.error]
        if failed:
            self.error, self.done = failed[0], True
        elif all(call.done for call in self.searches):
            self.value, self.done = merge_topk([call.value for call in self.searches], self.k), True


class _SingleCall:
    """A `Call` seen through the same `settle(ready)` interface as `RetrievalCall`."""

    def __init__(self, call: Call):
        self.call = call

    @property
    def refs(self) -> list:
        return self.call.refs

    @property
    def done(self) -> bool:
        return self.call.done

    @property
    def error(self) -> str | None:
        return self.call.error

    @property
    def value(self) -> Any:
        return self.call.value

    def settle(self, ready: set) -> None:
        if self.call.refs[0] in ready:
            self.call.settle()


class ActorPools:
    """`StagePools` and `Stages` over Ray actor pools."""

    def __init__(self, cfg: Config, pools: dict[str, ReplicaPool], shards: list[ReplicaPool],
                 router: RetrievalRouter, placement: StagePlacement):
        self.cfg, self.pools, self.shards, self.router, self.placement = cfg, pools, shards, router, placement
        self.stages = self
        self.policy: dict[str, PolicyWeights] = {}

    @classmethod
    def launch(cls, cfg: Config, device_time: dict[str, DeviceTime]) -> ActorPools:
        """Place every stage's actors (restartable, CPUs from `learner.actor_num_cpus`, GPUs per section).

        `device_time` (benchmarks only) adds simulated device seconds to the calls of the stages it
        names ("translate", "retrieve", "rerank", "answer", "score").
        """
        unknown = set(device_time) - {"translate", "retrieve", "rerank", "answer", "score"}
        if unknown:
            raise ValueError(f"device_time: unknown stage {sorted(unknown)[0]!r}")
        cache, learner = cfg.zoo.cache_dir, cfg.learner
        placement = StagePlacement(cfg)

        def place(actor_class, count: int, num_gpus: float, *args, stage: str) -> list:
            return [actor_class.options(num_cpus=learner.actor_num_cpus, num_gpus=num_gpus,
                                        max_restarts=learner.max_restarts, max_task_retries=0,
                                        **placement.options(stage, i)).remote(*args, device_time=device_time.get(stage))
                    for i in range(count)]

        groups = {
            "translate": place(TranslatorActor, cfg.translator.num_replicas, cfg.translator.num_gpus, cfg.translator,
                               cache, stage="translate"),
            "retrieve": place(EncoderActor, cfg.encoder.num_replicas, cfg.encoder.num_gpus, cfg.encoder, cache,
                              stage="retrieve"),
            "rerank": place(RerankerActor, cfg.reranker.num_replicas, cfg.reranker.num_gpus, cfg.reranker, cache,
                            stage="rerank"),
            "answer": place(GeneratorActor, cfg.generator.num_replicas, cfg.generator.num_gpus, cfg.generator, cache,
                            stage="answer"),
            "score": place(RewardActor, cfg.reward.num_replicas, cfg.reward.num_gpus, cfg.reward, cache,
                           stage="score"),
        }
        router = RetrievalRouter.launch(cfg.index.dir, cfg.index, max_restarts=learner.max_restarts)
        for stage, actors in groups.items():
            _wait_started(stage, actors)
        encoder_identity = ray.get(groups["retrieve"][0].identity.remote())
        router.manifest.check_encoder(encoder_identity, ray.get(groups["retrieve"][0].dim.remote()))
        pools = {stage: ReplicaPool(stage, actors, learner.calls_per_replica, learner.call_retries)
                 for stage, actors in groups.items()}
        shards = [ReplicaPool(f"retrieval_shard_{i}", [shard], learner.calls_per_replica, learner.call_retries)
                  for i, shard in enumerate(router.shards)]
        return cls(cfg, pools, shards, router, placement)

    # StagePools: what the streaming rollout drives.

    def share(self, table: QuestionTable) -> ray.ObjectRef:
        return ray.put(table)

    def has_room(self, stage: str) -> bool:
        return self.pools[_POOL_OF[stage]].has_room()

    def submit(self, stage: str, *args: Any) -> RetrievalCall | _SingleCall:
        pool = self.pools[_POOL_OF[stage]]
        if stage == "retrieve":
            return RetrievalCall(pool, self.shards, args[0], self.cfg.index.top_k)
        method, policy = _METHODS[stage]
        if policy:
            args = (*args, self.policy[policy])
        return _SingleCall(pool.call(method, *args))

    def wait(self, futures: list, timeout: float | None = None) -> list:
        """Until at least one future is done (a stage call settled, or a plain object ref ready) or `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            refs = [ref for future in futures for ref in _refs_of(future)]
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ray.wait(refs, num_returns=1, timeout=left, fetch_local=False)
            ready = set(ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[0])
            done = []
            for future in futures:
                if isinstance(future, ray.ObjectRef):
                    if future in ready:
                        done.append(future)
                elif not future.done:
                    future.settle(ready)
                    if future.done:
                        done.append(future)
            if done or (deadline is not None and time.monotonic() >= deadline):
                return done

    def result(self, future: RetrievalCall | _SingleCall) -> Any:
        if future.error is not None:
            raise StageFailed(future.error)
        return future.value

    # Stages: blocking calls, for evaluation and installing weights.

    def install(self, weights: Weights) -> None:
        """Sample with `weights` from the next call on. Version 0 without a state: the initial weights every
        replica loads itself."""
        for component in ("translator", "reranker"):
            state = getattr(weights, component)
            if state is None and weights.version != 0:
                raise ValueError(f"{component} weights of version {weights.version}: the Ray stages need the "
                                 "published state (a learner that trains in place only serves in-process stages)")
            refs = () if state is None else (state if isinstance(state, ray.ObjectRef) else ray.put(state),)
            self.policy[component] = PolicyWeights(weights.version, refs)

    def translate(self, table, n: int, seed: int):
        return self._run("translate", self._shared(table), n, seed)

    def translate_greedy(self, table) -> list[str]:
        return self._run("translate_greedy", self._shared(table))

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        return self._run("retrieve", queries)

    def rerank(self, table, rows, queries, hits, m: int, seed: int):
        return self._run("rerank", self._shared(table), rows, queries, hits, m, seed)

    def rerank_greedy(self, table, rows, queries, hits):
        return self._run("rerank_greedy", self._shared(table), rows, queries, hits)

    def answer(self, table, rows, evidence):
        return self._run("answer", self._shared(table), rows, evidence)

    def score(self, table, rows, answers):
        return self._run("score", self._shared(table), rows, answers)

    def generator_throughput(self) -> dict[str, float]:
        """The generator pool's own batched rate: leaves answered over the busiest replica's answering seconds."""
        reports = self.pools["answer"].broadcast("throughput")
        leaves = sum(r["leaves"] for r in reports)
        seconds = max(r["seconds"] for r in reports)
        return {"leaves": leaves, "seconds": seconds, "leaves_per_s": leaves / seconds if seconds > 0 else 0.0}

    def restarts(self) -> dict[str, int]:
        """Calls re-dispatched after their replica died, per pool."""
        return {pool.name: pool.redispatched for pool in [*self.pools.values(), *self.shards] if pool.redispatched}

    def shutdown(self) -> None:
        for pool in self.pools.values():
            for actor in pool.actors:
                ray.kill(actor, no_restart=True)
        self.router.shutdown()
        self.placement.remove()

    def _shared(self, table) -> ray.ObjectRef:
        return table if isinstance(table, ray.ObjectRef) else self.share(table)

    def _run(self, stage: str, *args: Any) -> Any:
        future = self.submit(stage, *args)
        while not self.wait([future]):
            pass
        return self.result(future)


_POOL_OF = {"translate": "translate", "translate_greedy": "translate", "retrieve": "retrieve",
            "rerank": "rerank", "rerank_greedy": "rerank", "answer": "answer", "score": "score"}
_METHODS = {"translate": ("sample", "translator"), "translate_greedy": ("greedy", "translator"),
            "rerank": ("sample", "reranker"), "rerank_greedy": ("greedy", "reranker"),
            "answer": ("answer", None), "score": ("score", None)}


def _refs_of(future) -> list:
    return [future] if isinstance(future, ray.ObjectRef) else ([] if future.done else future.refs)


def _wait_started(stage: str, actors: list) -> None:
    """Fail fast, naming the actor, if one cannot be placed or cannot load its model."""
    for index, actor in enumerate(actors):
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=STARTUP_TIMEOUT_S)
        except GetTimeoutError:
            raise RuntimeError(f"{stage} replica {index} did not start within {STARTUP_TIMEOUT_S:.0f} s "
                               "(not enough free resources to place it? see `mmrag plan`)") from None
        except RayActorError as exc:
            raise RuntimeError(f"{stage} replica {index} failed to start: {exc}") from None

