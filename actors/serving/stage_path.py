"""StagePath: how the ingress sends one request through the stage-group deployments, surviving replica failures.

Between validation and the reply: the ingress hands each request's `StageState` to
`StagePath.run`, which calls the deployment of every `serving.stage_groups` entry in turn
(a lone `retrieve` group: every shard deployment at once, merged with `merge_topk`). When
several deployments read a large (encoded) image (`serving.image_reference_min_bytes`), it goes into
the object store once and they receive its reference. A call that fails because its replica
died or was unavailable is sent again (Serve routes it to a live or restarted replica) until
the request's deadline (`serving.request_timeout_s`); a request still unanswered then raises
`ServiceUnavailable`, which the API sends as a 503 with Retry-After. `until_answered` is that
rule, and the front calls the ingress by it too. Errors in the stages' own code propagate.
With `serving.first_group_in_ingress` the first group is a local call in the ingress.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import ray
from ray import ObjectRef
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError
from ray.serve.handle import DeploymentHandle, DeploymentResponse

from mmrag.retrieval.merge import merge_topk
from mmrag.serving.api import ServiceUnavailable
from mmrag.serving.state import StageState, without_spent_inputs

FAILED_REPLICA_ERRORS = (RayActorError, DeploymentUnavailableError)
"""A replica died or is unreachable, or the deployment has none running: sending the call again may succeed."""
RETRY_PAUSE_S = 0.2
"""Wait before sending a failed call again, so Serve can notice the dead replica and route elsewhere."""
IMAGE_STAGES = ("translate", "rerank", "generate")


@dataclass(frozen=True)
class StageCall:
    """One stage group and what runs it: the deployment handles (one per index shard for a lone `retrieve`),
    or, for a group in the ingress itself (`serving.first_group_in_ingress`), a local coroutine."""

    stages: list[str]
    handles: list[DeploymentHandle] = field(default_factory=list)
    local: Callable[[StageState], Awaitable[StageState]] | None = None

    @property
    def is_shard_search(self) -> bool:
        return self.stages == ["retrieve"]

    @property
    def reads_image(self) -> bool:
        return any(stage in IMAGE_STAGES for stage in self.stages)


class StagePath:
    def __init__(self, calls: list[StageCall], image_reference_min_bytes: int, timeout_s: float):
        self.calls = calls
        self.timeout_s = timeout_s
        self.image_reference_min_bytes = image_reference_min_bytes
        self.image_readers = sum(call.reads_image for call in calls)

    async def run(self, state: StageState) -> tuple[StageState, float]:
        """The finished state, and the milliseconds spent between deployments (calls minus their stages' work)."""
        deadline = time.monotonic() + self.timeout_s
        if self.image_readers > 1 and len(state.image) >= self.image_reference_min_bytes:
            state.image = ray.put(state.image)
        transfer_ms = 0.0
        for call in self.calls:
            begin = time.perf_counter()
            state = await self._until_answered(call, state, deadline)
            elapsed = (time.perf_counter() - begin) * 1000
            if call.is_shard_search:
                state.stage_ms["retrieve"] = elapsed
            else:
                transfer_ms += elapsed - sum(state.stage_ms[stage] for stage in call.stages)
        return state, transfer_ms

    async def _until_answered(self, call: StageCall, state: StageState, deadline: float) -> StageState:
        if call.local is not None:
            return await call.local(state)
        if not call.is_shard_search:
            (state,) = await until_answered(lambda: [call.handles[0].run.remote(state)], deadline,
                                            f"stages {'+'.join(call.stages)}", self.timeout_s)
            return state
        results = await until_answered(lambda: [shard.search.remote(state.vector, state.top_k)
                                                for shard in call.handles], deadline, "stage retrieve", self.timeout_s)
        state.hits = merge_topk([[hits] for hits in results], state.top_k)[0]
        return without_spent_inputs(state, "retrieve")


async def until_answered(send: Callable[[], list[DeploymentResponse]], deadline: float, what: str,
                         timeout_s: float) -> list:
    """The results of the calls `send` makes, made again after a replica failure until `deadline`.

    A full queue (`BackPressureError`) is not retried: the caller is told to come back later.
    """
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServiceUnavailable(f"{what}: no answer within {timeout_s:g} s (replicas down, restarting "
                                     "or overloaded)")
        responses = send()
        try:
            return await asyncio.wait_for(asyncio.gather(*responses), remaining)
        except (TimeoutError, BackPressureError, *FAILED_REPLICA_ERRORS) as exc:
            for response in responses:
                cancel(response)
            if isinstance(exc, BackPressureError):
                raise ServiceUnavailable(f"{what}: the queue is full") from exc
            if not isinstance(exc, TimeoutError):
                await asyncio.sleep(min(RETRY_PAUSE_S, max(deadline - time.monotonic(), 0.0)))


def cancel(response: DeploymentResponse) -> None:
    """Best effort. Outside a replica, cancelling a call whose routing failed raises that failure again: it is
    the one `until_answered` is handling already."""
    with contextlib.suppress(BackPressureError, *FAILED_REPLICA_ERRORS):
        response.cancel()


async def resolved_image(image: bytes | ObjectRef) -> bytes:
    """The encoded image itself, fetched when it travels as an object-store reference."""
    return await image if isinstance(image, ObjectRef) else image
