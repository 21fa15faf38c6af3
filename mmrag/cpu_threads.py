"""How many torch threads a process runs: as many as the CPUs it owns, fewer for models too small to split.

Every process the project starts or runs in (a CLI command, `mmrag.Pipeline`, a Ray actor, a Serve
replica, a zoo build worker) calls `use_owned_cpus` where it starts, and a process that loads the
pipeline's models itself (`mmrag.Pipeline`, `LocalPipeline`) calls `fit_threads_to_models` then. The CPUs a process owns are, first to last:
1. an explicit setting: `OMP_NUM_THREADS` (or `MKL_NUM_THREADS`) in its environment;
2. the CPUs it was assigned: Ray's `num_cpus` for an actor or replica (passed in by the caller, as
   this module does not import Ray), or a parent's share for a pool worker;
3. its CPU affinity (`os.sched_getaffinity`).
Ops on small models are too short to split: on a machine where other processes use the cores, each
extra thread waits at every op's barrier for a core, and an answer takes many times as long. So the
intra-op threads are also capped at one per `PARAMETERS_PER_THREAD` parameters of the largest model
the process runs; an explicit setting is never capped. The decision is logged once per process (and
again if it changes). This module imports neither torch nor FAISS: it sets the threads of those
the process has imported (a process that never imports torch, such as the rule reward's, pays nothing).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

EXPLICIT_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
PARAMETERS_PER_THREAD = 50_000_000
"""Parameters of the largest model per intra-op thread. The zoo's models, far below it, answer fastest on one thread
idle and busy alike (benchmarks/latency.py); the threshold for larger models is an estimate."""


@dataclass(frozen=True)
class ThreadDecision:
    intra_op: int
    """torch intra-op threads, and FAISS's OpenMP threads."""
    inter_op: int
    """torch inter-op threads."""
    source: str
    """Where the owned CPUs came from, in words."""


def explicit_threads(env: Mapping[str, str]) -> tuple[int, str] | None:
    """The thread count the user set in `env`, and the variable's name; None when neither is set."""
    for name in EXPLICIT_VARIABLES:
        value = env.get(name, "").strip()
        if not value:
            continue
        first = value.split(",")[0].strip()  # OpenMP also takes a list, one count per nesting level
        if not first.isdigit() or int(first) < 1:
            raise ValueError(f"{name}={value!r}: expected a positive whole number of threads")
        return int(first), name
    return None


def decide_threads(env: Mapping[str, str], assigned_cpus: float | None, affinity: int,
                   largest_model_parameters: int | None = None) -> ThreadDecision:
    """The threads of a process with environment `env`, `assigned_cpus` (Ray's or a parent's; None: none assigned),
    `affinity` CPUs it may run on, and (once loaded) `largest_model_parameters` in its largest model."""
    explicit = explicit_threads(env)
    if explicit is not None:
        threads, name = explicit
        return ThreadDecision(threads, threads, f"{name}={threads}")
    if assigned_cpus is not None:
        owned, source = max(1, math.floor(assigned_cpus)), f"{assigned_cpus:g} CPUs assigned"
    else:
        owned, source = max(1, affinity), f"CPU affinity of {affinity}"
    intra_op = owned
    if largest_model_parameters is not None:
        useful = max(1, math.ceil(largest_model_parameters / PARAMETERS_PER_THREAD))
        if useful < owned:
            intra_op = useful
            source += f", largest model {largest_model_parameters / 1e6:.1f}M parameters"
    return ThreadDecision(intra_op, owned, source)


_process_cpus: dict[str, Any] = {}
"""What this process's first `use_owned_cpus` was told (its role and assigned CPUs) and the decision last logged."""


def use_owned_cpus(role: str, assigned_cpus: float | None = None) -> ThreadDecision:
    """Set this process's torch threads from the CPUs it owns (see the module docstring); call it where it starts.

    `role` names the process in the log line; `assigned_cpus`: Ray's `num_cpus` for an actor or replica,
    a parent's share for a pool worker, None otherwise.
    """
    _process_cpus.setdefault("role", role)
    _process_cpus.setdefault("assigned_cpus", assigned_cpus)
    return _apply(decide_threads(os.environ, _process_cpus["assigned_cpus"], len(os.sched_getaffinity(0))))


def fit_threads_to_models(components: Iterable[Any]) -> ThreadDecision:
    """Cap this process's intra-op threads by its largest model among `components` (modules, or objects holding
    them); the owned CPUs are those its `use_owned_cpus` was told, or its affinity if it has not called it."""
    decision = decide_threads(os.environ, _process_cpus.get("assigned_cpus"), len(os.sched_getaffinity(0)),
                              largest_model_parameters(components))
    return _apply(decision)


def largest_model_parameters(components: Iterable[Any], depth: int = 3) -> int:
    """Parameters of the largest `torch.nn.Module` among `components` and the objects their attributes hold
    (`depth` levels down; a module's own submodules count in it); 0 in a process without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    modules: dict[int, Any] = {}
    level = list(components)
    for _ in range(depth):
        deeper = []
        for item in level:
            if isinstance(item, torch.nn.Module):
                modules[id(item)] = item
            elif isinstance(item, Mapping):
                deeper += item.values()
            elif hasattr(item, "__dict__") and not isinstance(item, type):
                deeper += vars(item).values()
        level = deeper
    return max((sum(p.numel() for p in module.parameters()) for module in modules.values()), default=0)


def _apply(decision: ThreadDecision) -> ThreadDecision:
    torch, faiss = sys.modules.get("torch"), sys.modules.get("faiss")
    if torch is not None:
        torch.set_num_threads(decision.intra_op)
        if "inter_op" not in _process_cpus:
            try:
                torch.set_num_interop_threads(decision.inter_op)
            except RuntimeError:  # torch allows it once, before any inter-op work; a library got there first
                pass
            _process_cpus["inter_op"] = torch.get_num_interop_threads()
    if faiss is not None:
        faiss.omp_set_num_threads(decision.intra_op)
    if _process_cpus.get("logged") != decision:
        _process_cpus["logged"] = decision
        logger.info("%s: %d intra-op thread(s), %d inter-op (%s)", _process_cpus.get("role", "process"),
                    decision.intra_op, _process_cpus.get("inter_op", decision.inter_op), decision.source)
    return decision
