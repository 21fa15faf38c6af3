"""AnswerIngress: the root deployment of the Serve application, where requests enter the pipeline.

It sends each request's `StageState` through the stage groups in the greedy inference order
(`StagePath`: translate -> encode -> retrieve -> rerank -> generate; their deployments, and
with `serving.first_group_in_ingress` the first group right here). Two ways in:

- `run(state)`, by deployment handle: how `mmrag serve`'s HTTP front (front.py) calls it,
  the request validated there already;
- HTTP through Serve's proxy (`serve run mmrag/configs/serve/local.yaml`): the replica serves the
  same API (`mmrag.serving.api.answer_api`) over `StagePath.run`.
"""

from __future__ import annotations

from fastapi import FastAPI
from ray import serve

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.serving import configure_batching, replica_device
from mmrag.actors.serving.stage_path import StageCall, StagePath
from mmrag.actors.serving.stage_group import run_group
from mmrag.config import Config
from mmrag.serving.api import ApiSettings, answer_api
from mmrag.serving.state import StageState


@serve.deployment
@serve.ingress()
class AnswerIngress:
    def __init__(self, groups: list[list[str]], handles: list[list], cfg: Config, checkpoint: str,
                 settings: ApiSettings):
        use_actor_cpus("AnswerIngress")
        serving = cfg.serving
        calls = [StageCall(stages, group_handles) for stages, group_handles in zip(groups, handles)]
        if serving.first_group_in_ingress:
            from mmrag.serving.greedy_stages import GreedyStages  # in the replica, as the stage groups' (stage_group.py)

            self.first_group = GreedyStages.from_config(cfg, checkpoint, groups[0], replica_device())
            configure_batching(self.run_first_group, serving)
            calls[0] = StageCall(groups[0], local=self.run_first_group)
        self.path = StagePath(calls, serving.image_reference_min_bytes, serving.request_timeout_s)
        self.settings = settings

    def __serve_build_asgi_app__(self) -> FastAPI:
        """The HTTP API, for requests that come through Serve's proxy."""
        return answer_api(self.path.run, self.settings)

    async def run(self, state: StageState) -> tuple[StageState, float]:
        """A validated request through the stage groups: the finished state, and the milliseconds between them."""
        return await self.path.run(state)

    @serve.batch
    async def run_first_group(self, states: list[StageState]) -> list[StageState]:
        """The first stage group, run here (`serving.first_group_in_ingress`), batched like a group deployment's."""
        return await run_group(self.first_group, states)
