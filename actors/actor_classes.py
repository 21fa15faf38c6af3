"""ActorClasses: which class each role's Ray actors are made from.

`ActorPools.launch` and `LearnerGroup` place these (plain classes, made actors with
`ray.remote` where they are placed), and `mmrag.pipelines.train.train_distributed` passes them on.
The default is the production classes; a benchmark passes subclasses of them instead (e.g.
`benchmarks.simulated_device`), so the production classes carry no benchmark hook.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrag.actors.encoder import EncoderActor
from mmrag.actors.generator import GeneratorActor
from mmrag.actors.learner import LearnerRank
from mmrag.actors.reranker import RerankerActor
from mmrag.actors.reward import RewardActor
from mmrag.actors.translator import TranslatorActor


@dataclass(frozen=True)
class ActorClasses:
    translate: type = TranslatorActor
    """Query-translator policy replicas."""
    retrieve: type = EncoderActor
    """Query encoders (the retrieval shards are `mmrag.actors.retrieval`'s own)."""
    rerank: type = RerankerActor
    """Reranker policy replicas."""
    answer: type = GeneratorActor
    """Frozen generators."""
    score: type = RewardActor
    """Reward scorers."""
    learn: type = LearnerRank
    """The learner group's ranks."""
