"""The pipeline's stage interface: what the trainer loop, the rollout stream and evaluation call.

One rollout micro-batch goes translate -> retrieve (encode, then search every shard) ->
rerank -> answer -> score.
Question-level inputs (images, question texts, reference answers) travel as one
`QuestionTable` per micro-batch: on Ray it is put in the object store once and every stage
call takes that reference. Its images are where they are stored (`StoredImage`: a file and a
row): the stage that needs them decodes them, the driver never does. The rows of a
later stage (one per sampled query, then one per sampled selection) name their question
by its index in the table.

`mmrag.training.pipeline.LocalPipeline` implements `Stages` in one process;
`mmrag.actors.stage_pools.ActorPools` implements it over pools of Ray actors (and adds the
non-blocking submission the streaming rollout uses).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from PIL import Image

from mmrag.data.dataset import ImageSource, Question, resolve_image
from mmrag.retrieval.hit import Hit

if TYPE_CHECKING:
    # Named in annotations only: every actor imports this module for its messages, and these bring torch,
    # transformers and open_clip, which a reward or retrieval actor never loads.
    from mmrag.models.translator import QuerySample
    from mmrag.rl.plackett_luce import Selection
    from mmrag.training.learner import Weights


@dataclass
class QuestionTable:
    """The question-level inputs of one micro-batch, shared by every stage call on it."""

    image_sources: list[ImageSource]
    questions: list[str]
    references: list[list[str]]

    @classmethod
    def of(cls, questions: list[Question]) -> QuestionTable:
        return cls([q.image_source for q in questions], [q.question for q in questions],
                   [q.answers for q in questions])

    def __len__(self) -> int:
        return len(self.questions)

    @property
    def images(self) -> list[Image.Image]:
        """Every row's image, decoded here (in the stage that uses them)."""
        return self.images_of(range(len(self)))

    def images_of(self, rows) -> list[Image.Image]:
        decoded = {row: resolve_image(self.image_sources[row]) for row in set(rows)}
        return [decoded[row] for row in rows]

    def questions_of(self, rows: list[int]) -> list[str]:
        return [self.questions[row] for row in rows]

    def references_of(self, rows: list[int]) -> list[list[str]]:
        return [self.references[row] for row in rows]


@dataclass
class SampledQueries:
    """n sampled queries per question of a table, and the translator version that drew them."""

    queries: list[list[QuerySample]]
    policy_version: int
    sync_difference: float | None = None
    """The weight-sync probe's difference, when this call installed a checked version (`learner.sync_check_every`)."""


@dataclass
class SampledSelections:
    """m sampled selections per query row, their log-probs under the sampling policy, and its version."""

    selections: list[list[Selection]]
    logprobs: list[list[float]]
    policy_version: int
    gated: bool = False
    """Drawn by a reranker with a retrieval gate: each row's first selection is the gate's skip arm (empty), the
    rest the ranking's draws (`AdaptiveReranker.sample`)."""
    sync_difference: float | None = None
    """The weight-sync probe's difference, when this call installed a checked version (`learner.sync_check_every`)."""


class Stages(Protocol):
    """The five stages plus the greedy inference variants.

    `seed` makes a sampling call's draws a function of the seed and the call's inputs alone,
    whichever replica serves it, so streamed and in-process rollouts draw the same trees.
    """

    def install(self, weights: Weights) -> None:
        """Sample with these trainable weights from the next call on (a policy version)."""

    def translate(self, table: QuestionTable, n: int, seed: int) -> SampledQueries:
        """n sampled queries per question."""

    def translate_greedy(self, table: QuestionTable) -> list[str]:
        """The inference query of each question."""

    def retrieve(self, queries: list[str]) -> list[list[Hit]]:
        """The global top-K documents of each query: the frozen encoder, then every index shard."""

    def rerank(self, table: QuestionTable, rows: list[int], queries: list[str], hits: list[list[Hit]],
               m: int, seed: int) -> SampledSelections:
        """m sampled selections (ordered subsets of each row's hits, possibly empty) per query row."""

    def rerank_greedy(self, table: QuestionTable, rows: list[int], queries: list[str],
                      hits: list[list[Hit]]) -> list[Selection]:
        """The inference selection of each query row."""

    def answer(self, table: QuestionTable, rows: list[int], evidence: list[list[str]]) -> list[str]:
        """The frozen generator's answer for each row, from the row's evidence texts only."""

    def score(self, table: QuestionTable, rows: list[int], answers: list[str]) -> list[float]:
        """The frozen reward of each row's answer against its question's references, in [0, 1]."""
