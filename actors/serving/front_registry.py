"""FrontRegistry: which `mmrag serve` fronts use each Serve application of the cluster, so none deletes it under another.

One detached actor per cluster (named, created by the first front that asks for it). A front
`attach`es when it starts serving an application, whether it deployed it or found it running,
and `detach`es when it stops, learning how many fronts still use it: the front that deployed
the application deletes it only when none does (mmrag/pipelines/serve.py). A front killed without
its cleanup never detaches, so its application stays deployed: the safe side (`serve delete`).
"""

from __future__ import annotations

import ray

REGISTRY_NAME = "mmrag-serve-fronts"
REGISTRY_NAMESPACE = "mmrag"


@ray.remote(num_cpus=0)
class FrontRegistry:
    def __init__(self):
        self.fronts: dict[str, set[str]] = {}

    def attach(self, app: str, front: str) -> None:
        self.fronts.setdefault(app, set()).add(front)

    def detach(self, app: str, front: str) -> int:
        """Forget `front`; how many other fronts still use `app`."""
        fronts = self.fronts.get(app, set())
        fronts.discard(front)
        return len(fronts)


def front_registry():
    """The cluster's registry (a handle), created on first use; it lives as long as the cluster."""
    return FrontRegistry.options(name=REGISTRY_NAME, namespace=REGISTRY_NAMESPACE, lifetime="detached",
                                 get_if_exists=True).remote()
