"""What travels between the serving deployments: one request's `StageState`, and the stage names.

The API (mmrag/serving/api.py) builds a `StageState` from each valid request; the ingress
(mmrag/actors/serving/ingress.py) hands it to the deployments of `serving.stage_groups` in order;
each fills in its stages' outputs (mmrag/serving/greedy_stages.py). Light on purpose (no model
code), so the front and the ingress import it without loading transformers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmrag.retrieval.hit import Hit

STAGES = ("translate", "encode", "retrieve", "rerank", "generate")


@dataclass
class StageState:
    """One request on its way through the stages: inputs, then each stage's output as it is computed."""

    image: Any
    """The encoded image bytes, or an object-store reference to them (the deployment resolves and decodes it);
    in one process (`mmrag.Pipeline`), whatever its caller keeps there: the stages read the images given beside."""
    question: str
    top_k: int
    max_docs: int
    query: str | None = None
    vector: np.ndarray | None = None
    hits: list[Hit] | None = None
    """The top-k retrieved documents (until the reranker has chosen among them)."""
    evidence: list[Hit] | None = None
    """The reranker's selection, in its order, without document images."""
    answer: str | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)


def check_stage_groups(groups: list[list[str]]) -> None:
    """ValueError unless the groups cover every stage once, in inference order."""
    flat = [stage for group in groups for stage in group]
    if flat != list(STAGES) or not all(groups):
        raise ValueError(f"serving.stage_groups: expected non-empty groups covering {', '.join(STAGES)} once each, "
                         f"in that order, got {groups!r}")


def without_spent_inputs(state: StageState, last_stage: str) -> StageState:
    """Drop what no stage after `last_stage` reads: the query vector, the candidates, and finally the image."""
    done = STAGES[:STAGES.index(last_stage) + 1]
    spent = {"vector": "retrieve" in done, "hits": "rerank" in done, "image": "generate" in done}
    return dataclasses.replace(state, **{name: None for name, gone in spent.items() if gone})
