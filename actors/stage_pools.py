"""ActorPools: the pipeline's stages on pools of Ray actors, for the streaming rollout and for evaluation.

One `ReplicaPool` per stage: translator replicas, encoder replicas, one pool per retrieval
shard, reranker replicas, the generator pool and the reward pool. `submit` starts one stage
call on a micro-batch and returns a future; `wait` blocks until some finish, re-dispatching
calls whose replica died or passed its deadline (`mmrag.actors.pool`). A micro-batch's `QuestionTable`
is put in the object store once
(`share`) and every call takes that reference, so images never pass through the driver
again; retrieval chains the encoder's vectors straight into the shards' searches and their
hits into a merge task (the driver reads counts and the merged doc ids only); the merged hits
go to the reranker and the generator (which builds each leaf's evidence from them and the
selections) by reference. The blocking `Stages` methods (evaluation) run the same calls and
fetch what evaluation reads.
Policy calls carry the weights version installed last (`install`), so every replica samples
with the version the driver asks for, including one Ray has just restarted.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError

from mmrag.actors.actor_classes import ActorClasses
from mmrag.actors.faults import DRIVER_FAULTS, count_driver_faults
from mmrag.actors.placement import StagePlacement
from mmrag.actors.policy import PolicyWeights
from mmrag.actors.pool import Call, ReplicaPool, probed
from mmrag.actors.retrieval import RetrievalRouter, merge_shard_rows
from mmrag.config import Config
from mmrag.retrieval.hit import Hit
from mmrag.retrieval.retrieved_rows import RetrievedRows
from mmrag.training.learner import Weights
from mmrag.training.stages import QuestionTable
from mmrag.training.streaming import StageFailed

STARTUP_TIMEOUT_S = 600.0
"""How long an actor may take to be placed and load its model before the run fails naming it."""
HEALTH_POLL_S = 1.0
"""How often a wait looks at the health checks of replicas out of their pool."""


class RetrievalCall:
    """Encode the queries on an encoder replica, search every shard with the vectors, merge the top-K in a task.

    The driver waits on counts and reads the merged doc ids only: the vectors go to the shards, each shard's hits to
    the merge (`mmrag.actors.retrieval.merge_shard_rows`) and the merged hits on as `RetrievedRows.hits`, by reference.
    The merge, a plain task (Ray retries it if its worker dies), fails the call if it does not answer within the
    shards' deadline (`pools.call_timeout_s`)."""

    def __init__(self, encoders: ReplicaPool, shards: list[ReplicaPool], queries: list[str], k: int):
        self.shards, self.k = shards, k
        self.encode = encoders.call("encode_queries", queries, hedged=False)  # the searches wait on its vectors
        self.searches = self._searches()
        self.merge: list = []
        """(doc ids, merged hits) refs of the merge task, once every shard has answered."""
        self.merge_deadline = 0.0
        self.value: RetrievedRows | None = None
        self.error: str | None = None
        self.done = False

    def _searches(self) -> list[Call]:
        """The shards' searches on the encoder's vectors (none while the encode call backs off)."""
        if not self.encode.refs or self.encode.error:
            return []
        return [pool.call("search_rows", self.encode.returned[1], self.k) for pool in self.shards]

    @property
    def refs(self) -> list:
        pending = [] if self.encode.done else self.encode.refs
        return pending + [ref for call in self.searches if not call.done for ref in call.refs] + self.merge[:1]

    @property
    def deadline(self) -> float:
        pending = [call.deadline for call in [self.encode, *self.searches] if not call.done]
        return min(pending) if pending else self.merge_deadline

    def settle(self, ready: set) -> None:
        if not self.encode.done and _answered(self.encode, ready):
            resends = self.encode.resends
            self.encode.settle(ready)
            if self.encode.resends > resends:  # the encoder died: the searches wait on lost vectors
                self._search_again()
                return
        for call in self.searches:
            if not call.done and _answered(call, ready):
                call.settle(ready)
        if self.merge and self.merge[0] in ready:
            self._read_merge()
        self._conclude()

    def expire(self, now: float) -> None:
        if self.merge:
            if now >= self.merge_deadline:
                self.error, self.done = (f"merge_shard_rows: no answer within {self.shards[0].deadline_s:.3g} s "
                                         "(pools.call_timeout_s)"), True
            return
        if self.encode.expire(now):
            self._search_again()
            return
        for call in self.searches:
            call.expire(now)
        self._conclude()

    def _search_again(self) -> None:
        for call in self.searches:
            if not call.done and call.refs:
                call.abandon()
        self.searches = self._searches()

    def _conclude(self) -> None:
        if self.done:
            return
        failed = [c.error for c in [self.encode, *self.searches] if c.done and c.error]
        if failed:
            self.error, self.done = failed[0], True
        elif not self.merge and self.searches and all(call.done for call in self.searches):
            self.merge = merge_shard_rows.remote(self.k, *[call.returned[1] for call in self.searches])
            self.merge_deadline = time.monotonic() + self.shards[0].deadline_s

    def _read_merge(self) -> None:
        try:
            self.value, self.done = RetrievedRows(ray.get(self.merge[0]), self.merge[1]), True
        except RayError as exc:
            self.error, self.done = f"merge_shard_rows failed: {exc}", True


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

    @property
    def deadline(self) -> float:
        return self.call.deadline

    def settle(self, ready: set) -> None:
        if _answered(self.call, ready):
            self.call.settle(ready)

    def expire(self, now: float) -> None:
        self.call.expire(now)


class ActorPools:
    """`StagePools` and `Stages` over Ray actor pools."""

    def __init__(self, cfg: Config, pools: dict[str, ReplicaPool], shards: list[ReplicaPool],
                 router: RetrievalRouter, placement: StagePlacement):
        self.cfg, self.pools, self.shards, self.router, self.placement = cfg, pools, shards, router, placement
        self.stages = self
        self.policy: dict[str, PolicyWeights] = {}

    @classmethod
    def launch(cls, cfg: Config, classes: ActorClasses = ActorClasses()) -> ActorPools:
        """Place every stage's actors (restartable, CPUs from `pools.actor_num_cpus`, GPUs per section),
        each made from its class in `classes`, with `pools.standby_replicas` more of each stage and of each shard
        standing by; return once one replica of every stage and of every shard is up (the others join their pools
        as they come up, like replicas back from a health check)."""
        cache, settings = cfg.zoo.cache_dir, cfg.pools
        standby = settings.standby_replicas

        placement = StagePlacement(cfg)

        def place(actor_class: type, count: int, num_gpus: float, *args, stage: str) -> list:
            remote_class = probed(actor_class)
            return [remote_class.options(num_cpus=settings.actor_num_cpus, num_gpus=num_gpus,
                                         max_restarts=settings.max_restarts, max_task_retries=0,
                                         **placement.options(stage, i)).remote(*args)
                    for i in range(count + standby)]

        groups = {
            "translate": place(classes.translate, cfg.translator.num_replicas, cfg.translator.num_gpus,
                               cfg.translator, cache, stage="translate"),
            "retrieve": place(classes.retrieve, cfg.encoder.num_replicas, cfg.encoder.num_gpus, cfg.encoder, cache,
                              stage="retrieve"),
            "rerank": place(classes.rerank, cfg.reranker.num_replicas, cfg.reranker.num_gpus, cfg.reranker, cache,
                            stage="rerank"),
            "answer": place(classes.answer, cfg.generator.num_replicas, cfg.generator.num_gpus, cfg.generator, cache,
                            stage="answer"),
            "score": place(classes.score, cfg.reward.num_replicas, cfg.reward.num_gpus, cfg.reward, cache,
                           stage="score"),
        }
        router = RetrievalRouter.launch(cfg.index.dir, cfg.index, max_restarts=settings.max_restarts,
                                        replicas=cfg.index.shard_replicas + standby)
        readiness = {stage: wait_until_one_up(stage, actors) for stage, actors in groups.items()}
        encoder = next(actor for i, actor in enumerate(groups["retrieve"]) if i not in readiness["retrieve"])
        router.manifest.check_encoder(ray.get(encoder.identity.remote()), ray.get(encoder.dim.remote()))
        limits = (settings.calls_per_replica, settings.call_retries, settings.call_timeout_s,
                  settings.call_timeout_factor, settings.min_call_timeout_s, settings.hedge_factor)
        probe = settings.probe_timeout_s
        pools = {stage: ReplicaPool(stage, actors, *limits, serving=len(actors) - standby, probe_timeout_s=probe)
                 for stage, actors in groups.items()}
        shards = [ReplicaPool(f"retrieval_shard_{i}", replicas, *limits, serving=cfg.index.shard_replicas,
                              probe_timeout_s=probe)
                  for i, replicas in enumerate(router.shard_replicas)]
        for stage, pool in pools.items():
            pool.starting(readiness[stage])
        for pool, loading in zip(shards, router.loading):
            pool.starting({i: ref for i, ref in enumerate(loading) if not ray.wait([ref], timeout=0)[0]})
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
        """Until at least one future is done (a stage call settled, or a plain object ref ready) or `timeout`.

        Blocks in `ray.wait` until something is ready or the nearest call deadline (or a health check's
        poll) comes, never spinning; calls past their deadline are re-dispatched (`Call.expire`).
        """
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            calls = [f for f in futures if not isinstance(f, ray.ObjectRef) and not f.done]
            refs = [ref for future in futures for ref in _refs_of(future)]
            wake = [call.deadline for call in calls] + ([until] if until is not None else [])
            if any(pool.roster.out for pool in self._all_pools()):
                wake.append(time.monotonic() + HEALTH_POLL_S)
            wake += [attempt.answer_by for pool in self._all_pools() for attempt in pool.stragglers]
            left = None if not wake else max(min(wake) - time.monotonic(), 0.0)
            if refs:
                ray.wait(refs, num_returns=1, timeout=left, fetch_local=False)
                ready = set(ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)[0])
            else:  # every call is backing off before a re-send
                time.sleep(left or 0.0)
                ready = set()
            now = time.monotonic()
            for pool in self._all_pools():
                pool.check_health()
                pool.check_stragglers(now)
            done = []
            for future in futures:
                if isinstance(future, ray.ObjectRef):
                    if future in ready:
                        done.append(future)
                elif not future.done:
                    future.settle(ready)
                    if not future.done:
                        future.expire(now)
                    if future.done:
                        done.append(future)
            if done or (until is not None and now >= until):
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
            self.policy[component] = PolicyWeights.of(weights, component, refs, self.cfg.learner.sync_check_tolerance)

    def translate(self, table, n: int, seed: int):
        return self._run("translate", self._shared(table), n, seed)

    def translate_greedy(self, table) -> list[str]:
        return self._run("translate_greedy", self._shared(table))

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        return ray.get(self._run("retrieve", queries).hits)

    def rerank(self, table, rows, queries, hits, m: int, seed: int):
        return self._run("rerank", self._shared(table), rows, queries, hits, m, seed)

    def rerank_greedy(self, table, rows, queries, hits):
        return self._run("rerank_greedy", self._shared(table), rows, queries, hits)

    def answer(self, table, rows, evidence):
        return self._result_of(_SingleCall(self.pools["answer"].call("answer", self._shared(table), rows, evidence)))

    def score(self, table, rows, answers):
        return self._run("score", self._shared(table), rows, answers)

    def generator_throughput(self) -> dict[str, float]:
        """The generator pool's own batched rate: leaves answered over the busiest replica's answering seconds (of
        the replicas alive at the end; a restarted one counts from its restart)."""
        reports = self.pools["answer"].broadcast("throughput")
        leaves = sum(r["leaves"] for r in reports)
        seconds = max((r["seconds"] for r in reports), default=0.0)
        return {"leaves": leaves, "seconds": seconds, "leaves_per_s": leaves / seconds if seconds > 0 else 0.0}

    def redispatched_calls(self) -> dict[str, int]:
        """Calls re-dispatched after their replica died or hung past the deadline, per pool."""
        return {pool.name: pool.redispatched for pool in self._all_pools() if pool.redispatched}

    def hedged_calls(self) -> dict[str, int]:
        """Calls sent to a second replica because the first ran past the pool's hedge time, per pool."""
        return {pool.name: pool.hedged for pool in self._all_pools() if pool.hedged}

    def timed_out_calls(self) -> dict[str, int]:
        """Calls that passed their deadline (their replica killed), per pool."""
        return {pool.name: pool.timed_out for pool in self._all_pools() if pool.timed_out}

    def probed_alive_calls(self) -> dict[str, int]:
        """Probes of replicas past their tight deadline that answered (busy, not hung: kept, not killed), per pool."""
        return {pool.name: pool.probed_alive for pool in self._all_pools() if pool.probed_alive}

    def promoted_standbys(self) -> dict[str, int]:
        """Standbys that took a lost or hung serving replica's place, per pool."""
        return {pool.name: pool.promoted for pool in self._all_pools() if pool.promoted}

    def fault_counts(self) -> dict[str, int]:
        """Faults of every pool so far, by kind (`mmrag.actors.faults`)."""
        return dict(sum((pool.faults.counts for pool in self._all_pools()), Counter()))

    def export_faults(self, since: dict[str, int]) -> None:
        """The driver's faults among `since` go to the Ray metric (the pools' went there when they were recorded)."""
        count_driver_faults({kind: n for kind, n in since.items() if kind in DRIVER_FAULTS})

    def outages(self) -> list[dict]:
        """Every replica outage the pools saw (`mmrag.actors.outages.Outage`), pool by pool."""
        return [record for pool in self._all_pools() for record in pool.outages.records()]

    def _all_pools(self) -> list[ReplicaPool]:
        return [*self.pools.values(), *self.shards]

    def shutdown(self) -> None:
        for pool in self.pools.values():
            for actor in pool.actors:
                ray.kill(actor, no_restart=True)
        self.router.shutdown()
        self.placement.remove()

    def _shared(self, table) -> ray.ObjectRef:
        return table if isinstance(table, ray.ObjectRef) else self.share(table)

    def _run(self, stage: str, *args: Any) -> Any:
        return self._result_of(self.submit(stage, *args))

    def _result_of(self, future: RetrievalCall | _SingleCall) -> Any:
        while not self.wait([future]):
            pass
        return self.result(future)


_POOL_OF = {"translate": "translate", "translate_greedy": "translate", "retrieve": "retrieve",
            "rerank": "rerank", "rerank_greedy": "rerank", "answer": "answer", "score": "score"}
_METHODS = {"translate": ("sample", "translator"), "translate_greedy": ("greedy", "translator"),
            "rerank": ("sample", "reranker"), "rerank_greedy": ("greedy", "reranker"),
            "answer": ("answer_selected", None), "score": ("score", None)}


def _answered(call: Call, ready: set) -> bool:
    return any(ref in ready for ref in call.refs)


def _refs_of(future) -> list:
    return [future] if isinstance(future, ray.ObjectRef) else ([] if future.done else future.refs)


def wait_until_one_up(stage: str, actors: list) -> dict[int, ray.ObjectRef]:
    """Wait until one replica of `stage` is up; the others still starting, with their readiness refs (they join
    their pool when up). Fail fast, naming the actor, if none can be placed or one cannot load its model."""
    readiness = {actor.__ray_ready__.remote(): index for index, actor in enumerate(actors)}
    if not ray.wait(list(readiness), num_returns=1, timeout=STARTUP_TIMEOUT_S)[0]:
        raise RuntimeError(f"{stage}: no replica started within {STARTUP_TIMEOUT_S:.0f} s "
                           "(not enough free resources to place it? see `mmrag plan`)")
    up = ray.wait(list(readiness), num_returns=len(readiness), timeout=0)[0]
    for ref in up:
        try:
            ray.get(ref)
        except RayActorError as exc:
            raise RuntimeError(f"{stage} replica {readiness[ref]} failed to start: {exc}") from None
    return {index: ref for ref, index in readiness.items() if ref not in up}
