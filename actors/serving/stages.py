"""StageGroupDeployment: the stages of one `serving.stage_groups` entry, co-located in each replica.

(`run_group` is also how the ingress runs the first group itself, with `serving.first_group_in_ingress`.)

Between the ingress and the other groups: a batch of `StageState`s in, the same states out
with this group's outputs filled in (`mmrag.serving.stages.GreedyStages`, the offline greedy
path's calls). Concurrent requests share each model call through `@serve.batch`; images
that arrive as object-store references are fetched here, once per request.
"""

from __future__ import annotations

import asyncio

from ray import serve

from actors.serving import configure_batching, prepare_replica
from actors.serving.stage_path import resolved_image
from mmrag.config import Config
from mmrag.serving.stages import GreedyStages
from mmrag.serving.state import StageState


@serve.deployment
class StageGroupDeployment:
    def __init__(self, cfg: Config, checkpoint: str, stages: list[str]):
        self.group = GreedyStages.from_config(cfg, checkpoint, stages, prepare_replica(cfg))
        configure_batching(self.run, cfg.serving)

    @serve.batch
    async def run(self, states: list[StageState]) -> list[StageState]:
        """This group's stages over the batch, in inference order."""
        return await run_group(self.group, states)


async def run_group(group: GreedyStages, states: list[StageState]) -> list[StageState]:
    """`GreedyStages.run` on a batch, the images that came by reference fetched first."""
    images = await asyncio.gather(*(resolved_image(state.image) for state in states))
    return group.run(states, list(images))
