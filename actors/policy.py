"""Policy weights as calls carry them to translator and reranker replicas.

The learner publishes each version's trainable weights to the object store once; every
sampling call names the version it wants and carries a reference to them (nested in a list,
so Ray hands the reference over instead of resolving it on every call). A replica fetches
and installs a version only when it differs from the one it holds, so a freshly started or
restarted replica always samples with the version the driver asked for.
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


class InstalledVersion:
    """The version a replica holds, and the switch to another one."""

    def __init__(self) -> None:
        self.version: int | None = None
        """None until a version is installed: the replica holds the weights its config loads."""

    def ensure(self, weights: PolicyWeights, load: Callable[[dict], None]) -> int:
        """Install `weights` with `load` unless this replica already holds that version; the version held.

        Version 0 without a reference means the initial weights, which every replica loads itself.
        """
        if weights.version != self.version:
            if weights.refs:
                load(ray.get(weights.refs[0]))
            elif weights.version != 0:
                raise ValueError(f"policy weights of version {weights.version} came without a reference")
            self.version = weights.version
        return self.version
