"""Simulated device time: a benchmark-only cost slept on top of a stage call's real work.

This machine has no accelerator, and tiny CPU models cost almost nothing, so orchestration
(overlap of stages, pool scaling, asynchronous learning) cannot be judged from them alone.
`simulated_actors` gives the actor classes a benchmark places instead of the production
ones (through `ActorClasses`): subclasses whose timed call sleeps `per_call_s + per_item_s *
items` after its real work (or update), as if a GPU were busy for that long; sleeping frees the
CPU, as waiting on a device would. Benchmarks that use it say so in their output.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

from mmrag.actors.actor_classes import ActorClasses


@dataclass(frozen=True)
class DeviceTime:
    per_call_s: float
    """Fixed cost of one call (kernel launches, a forward over the batch)."""
    per_item_s: float
    """Cost per item of the call (leaf answered, query encoded, ...)."""

    def spend(self, items: int) -> None:
        time.sleep(self.per_call_s + self.per_item_s * items)

    def describe(self) -> str:
        return f"{self.per_call_s * 1000:.0f} ms per call + {self.per_item_s * 1000:.0f} ms per item"


TIMED_CALLS: dict[str, tuple[str, Callable[..., int]]] = {
    "translate": ("sample", lambda table, n, *_: len(table) * n),
    "retrieve": ("encode_queries", lambda texts: len(texts)),
    "rerank": ("sample", lambda table, rows, queries, hits, m, *_: len(rows) * m),
    "score": ("score", lambda table, rows, answers: len(rows)),
    "learn": ("update", lambda roots: len(roots)),
}
"""Per role (an `ActorClasses` field): the call that costs device time, and the items of one call.
The generator is timed inside its model call instead (`_SlowGenerator`), so its busy time counts it."""


def simulated_actors(device_time: dict[str, DeviceTime]) -> ActorClasses:
    """The production actor classes, those of the roles `device_time` names adding its cost to every timed call."""
    production = ActorClasses()
    unknown = set(device_time) - {*TIMED_CALLS, "answer"}
    if unknown:
        raise ValueError(f"device_time: unknown stage {sorted(unknown)[0]!r}; "
                         f"expected one of {sorted({*TIMED_CALLS, 'answer'})}")
    classes = {role: _timed(getattr(production, role), *TIMED_CALLS[role], cost)
               for role, cost in device_time.items() if role != "answer"}
    if "answer" in device_time:
        classes["answer"] = _slow_generator(production.answer, device_time["answer"])
    return ActorClasses(**classes)


def _timed(base: type, method: str, items: Callable[..., int], cost: DeviceTime) -> type:
    real = getattr(base, method)

    @functools.wraps(real)  # keeps Ray's method options (e.g. `num_returns`)
    def timed(self, *args):
        result = real(self, *args)
        cost.spend(items(*args))
        return result

    return type(f"Simulated{base.__name__}", (base,), {method: timed})


class _SlowModel:
    """A generator model whose `answer` also spends simulated device time per leaf."""

    def __init__(self, model, cost: DeviceTime):
        self.model, self.cost = model, cost

    def answer(self, *args) -> list[str]:
        answers = self.model.answer(*args)
        self.cost.spend(len(answers))
        return answers


def _slow_generator(base: type, cost: DeviceTime) -> type:
    def __init__(self, *args):
        base.__init__(self, *args)
        self.generator = _SlowModel(self.generator, cost)

    return type(f"Simulated{base.__name__}", (base,), {"__init__": __init__})
