"""The learner's rank processes over the bundles of its placement group, with spares started ahead.

A restore replaces every rank (a process group cannot take one back), and a new rank process spends most of
its start importing torch, DeepSpeed, transformers and open_clip: here 4.1-4.8 s of a 5.8-7.1 s restore, the
rest joining the process group and loading the models and the checkpoint. `learner.spare_ranks` processes are
started ahead, each in a bundle of its own, imported and idle; the next start takes them as its ranks before
it starts new ones, and then starts spares again in the bundles the old ranks left.
"""

from __future__ import annotations

from collections.abc import Callable

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayError


def error_of(ref: ray.ObjectRef) -> RayError | None:
    """The error a finished call raised, or None."""
    try:
        ray.get(ref)
    except RayError as exc:
        return exc
    return None


SPARE_CHECK_S = 1.0
"""How long `take` waits for the spares to answer a ping: a dead one's fails at once, a live one's answers in
milliseconds (one still importing is taken anyway: it is ready sooner than a new process)."""


class RankProcesses:
    def __init__(self, new_rank: Callable[[int], ActorHandle], bundles: int):
        """`new_rank(bundle)`: a new rank actor placed in that bundle; `bundles`: the ranks' and the spares'."""
        self.new_rank = new_rank
        self.free = list(range(bundles))
        self.spares: list[tuple[ActorHandle, int]] = []
        """Each spare's actor and bundle."""
        self.ranks: list[tuple[ActorHandle, int]] = []
        """Each rank's actor and bundle, in rank order."""

    def take(self, world: int) -> list[ActorHandle]:
        """`world` rank actors, in rank order: the live spares first, then new processes in free bundles."""
        self._release_lost_spares()
        self.ranks, self.spares = self.spares[:world], self.spares[world:]
        while len(self.ranks) < world:
            bundle = self.free.pop(0)
            self.ranks.append((self.new_rank(bundle), bundle))
        return self.rank_actors()

    def rank_actors(self) -> list[ActorHandle]:
        return [actor for actor, _ in self.ranks]

    def start_spares(self) -> None:
        """A spare in every free bundle, not waited for: it imports while the ranks train."""
        while self.free:
            bundle = self.free.pop(0)
            self.spares.append((self.new_rank(bundle), bundle))

    def spare_pids(self) -> list[int]:
        """Each spare's process id (in tests, to kill one or to find it among the ranks)."""
        return ray.get([actor.pid.remote() for actor, _ in self.spares])

    def _release_lost_spares(self) -> None:
        """Release the spares lost while standing by."""
        pings = [actor.__ray_ready__.remote() for actor, _ in self.spares]
        if pings:
            ray.wait(pings, num_returns=len(pings), timeout=SPARE_CHECK_S)
        lost = [spare for spare, ping in zip(self.spares, pings)
                if ray.wait([ping], timeout=0)[0] and error_of(ping) is not None]
        for spare in lost:
            self.spares.remove(spare)
            self._release(*spare)

    def stop_ranks(self) -> None:
        for actor, bundle in self.ranks:
            self._release(actor, bundle)
        self.ranks = []

    def stop_all(self) -> None:
        self.stop_ranks()
        for spare in self.spares:
            self._release(*spare)
        self.spares = []

    def _release(self, actor: ActorHandle, bundle: int) -> None:
        ray.kill(actor)
        self.free.append(bundle)
