"""StageGroupDeployment: the stages of one `serving.stage_groups` entry, co-located in each replica.

(`run_group` is also how the ingress runs the first group itself, with `serving.first_group_in_ingress`.)

Between the ingress and the other groups: a batch of `StageState`s in, the same states out
with this group's outputs filled in (`mmrag.serving.greedy_stages.GreedyStages`, the offline greedy
path's calls). Concurrent requests share each model call through `@serve.batch`; images
arrive encoded (by value, or as object-store references fetched here) and are decoded here,
once per request and group.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ray import serve

from mmrag.actors.owned_cpus import use_actor_cpus
from mmrag.actors.serving import configure_batching, replica_device
from mmrag.actors.serving.stage_path import resolved_image
from mmrag.config import Config
from mmrag.data.dataset import decode_image
from mmrag.serving.state import StageState

if TYPE_CHECKING:
    from mmrag.serving.greedy_stages import GreedyStages


@serve.deployment
class StageGroupDeployment:
    def __init__(self, cfg: Config, checkpoint: str, stages: list[str]):
        use_actor_cpus("StageGroupDeployment")
        # The model stack is imported here, in the replica: the driver that builds the application never runs a model.
        from mmrag.serving.greedy_stages import GreedyStages

        self.group = GreedyStages.from_config(cfg, checkpoint, stages, replica_device())
        configure_batching(self.run, cfg.serving)

    @serve.batch
    async def run(self, states: list[StageState]) -> list[StageState]:
        """This group's stages over the batch, in inference order."""
        return await run_group(self.group, states)


async def run_group(group: GreedyStages, states: list[StageState]) -> list[StageState]:
    """`GreedyStages.run` on a batch, the images that came by reference fetched, then decoded here."""
    images = await asyncio.gather(*(resolved_image(state.image) for state in states))
    return group.run(states, [decode_image(image) for image in images])
