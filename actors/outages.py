"""OutageLog: each replica outage a pool saw, timed, so a fault's cost can be split into its parts.

An outage opens when the pool notices a replica is gone (a call raised that the actor died,
or passed its deadline and the pool killed it, or a hedge on another replica answered first)
and closes when that replica answers a call again (Ray restarted it and it loaded its model),
or, standing by, its readiness check; `promoted` is when a standby took its place (its calls
went there). It counts the calls lost to it and the seconds they had already been running
(work to redo). Times are `time.monotonic()`, one
clock for every process of the machine, so a benchmark can line them up with its faults.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass
class Outage:
    pool: str
    replica: int
    cause: str
    """"died" (Ray reported the actor dead or restarting), "hung" (a call passed its deadline) or "slow" (a hedge
    answered first)."""
    noticed: float
    promoted: float | None = None
    """When a standby took the replica's place (None: none was loaded, or the pool has none)."""
    answered_again: float | None = None
    calls_lost: int = 0
    work_lost_s: float = 0.0
    """Seconds the lost calls had been running when they were given up (work the re-dispatch redoes)."""


class OutageLog:
    def __init__(self, pool: str):
        self.pool = pool
        self.closed: list[Outage] = []
        self.open: dict[int, Outage] = {}

    def lost(self, replica: int, cause: str, call_sent: float | None) -> bool:
        """A call to `replica` was lost (sent at `call_sent`; None: not a call): open its outage or add to it.
        Whether this opened one."""
        now = time.monotonic()
        opened = replica not in self.open
        outage = self.open.setdefault(replica, Outage(self.pool, replica, cause, now))
        if call_sent is not None:
            outage.calls_lost += 1
            outage.work_lost_s += now - call_sent
        return opened

    def replaced(self, replica: int) -> None:
        """A standby serves in `replica`'s place (within its open outage, if any)."""
        outage = self.open.get(replica)
        if outage and outage.promoted is None:
            outage.promoted = time.monotonic()

    def answered(self, replica: int) -> Outage | None:
        """`replica` answered: the outage this closed, if it had one open."""
        outage = self.open.pop(replica, None)
        if outage:
            outage.answered_again = time.monotonic()
            self.closed.append(outage)
        return outage

    def records(self) -> list[dict]:
        """Every outage, closed ones first, as plain dicts."""
        return [asdict(o) for o in [*self.closed, *self.open.values()]]
