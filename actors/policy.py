"""Policy weights as calls carry them to translator and reranker replicas.

The learner publishes each version's trainable weights to the object store once; every
sampling call names the weights id it wants (restore generation and version: a restore
counts versions up again from its checkpoint's, under a new generation) and carries a
reference to them (nested in a list, so Ray hands the reference over instead of resolving it
on every call). A replica fetches and installs whenever the id differs from the one it
holds, so a freshly started, restarted or restored-past replica always samples with the
weights the driver asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import ray


@dataclass(frozen=True)
class PolicyWeights:
    version: int
    refs: tuple
    """(ObjectRef of the trainable state dict,): one element, nested so Ray does not resolve it."""
    generation: int = 0
    """The run's restore generation (`Weights.generation`)."""


class InstalledVersion:
    """The version a replica holds, and the switch to another one."""

    def __init__(self) -> None:
        self.held: tuple[int, int] | None = None
        """(generation, version) installed; None until then: the replica holds the weights its config loads."""

    def needs(self, weights: PolicyWeights) -> bool:
        """Whether `weights` differ from the ones held: any other id, an older or repeated version included."""
        return (weights.generation, weights.version) != self.held

    def ensure(self, weights: PolicyWeights, load: Callable[[dict], None]) -> int:
        """Install `weights` with `load` unless this replica already holds them; the version held.

        Id 0.0 without a reference means the initial weights, which every replica loads itself.
        """
        if self.needs(weights):
            if weights.refs:
                load(ray.get(weights.refs[0]))
            elif (weights.generation, weights.version) != (0, 0):
                raise ValueError(f"policy weights {weights.generation}.{weights.version} came without a reference")
            self.held = (weights.generation, weights.version)
        return weights.version
