"""Roster: which replicas of a `ReplicaPool` serve calls, which stand by, and which are out until a check answers.

A pool of `serving` + `pools.standby_replicas` replicas starts with the first `serving` of them
serving and the others standing by: started and loaded, sent no call. A replica leaves (it was
lost, hung, or is still loading) with the check that brings it back (`__ray_ready__`, which
answers once Ray has restarted it and its constructor has loaded its model); if it served, a
standby takes its place at once, so a fault costs a promotion instead of a process start. A
replica back from its check serves if fewer than `serving` do, else it stands by. Plain
bookkeeping: the checks are held here and polled by the pool.
"""

from __future__ import annotations

from typing import Any


class Roster:
    def __init__(self, size: int, serving: int):
        if not 1 <= serving <= size:
            raise ValueError(f"a pool of {size} replicas cannot serve with {serving}")
        self.target = serving
        """How many replicas serve when enough are up."""
        self.serving = list(range(serving))
        self.standby = list(range(serving, size))
        """Loaded replicas sent no call, the first promoted first."""
        self.out: dict[int, Any] = {}
        """Replicas out of the pool -> the pending check that brings them back."""

    def leave(self, replica: int, check: Any) -> int | None:
        """`replica` is out until `check` answers; the standby promoted in its place (None: none, or it did not
        serve)."""
        was_serving = replica in self.serving
        self.out[replica] = check
        for role in (self.serving, self.standby):
            if replica in role:
                role.remove(replica)
        if not (was_serving and self.standby):
            return None
        promoted = self.standby.pop(0)
        self.serving.append(promoted)
        return promoted

    def join(self, replica: int) -> None:
        """`replica`'s check answered: it serves if too few do, else it stands by."""
        del self.out[replica]
        (self.serving if len(self.serving) < self.target else self.standby).append(replica)
