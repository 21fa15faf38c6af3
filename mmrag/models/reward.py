"""Frozen reward models: score each final answer of a rollout in [0, 1].

The last stage of the pipeline: (question, generated answer, reference answers) ->
reward r_ij, which the rollout tree backpropagates to the translator and reranker.
`build_reward(cfg.reward, cache_dir)` picks the backend named by `reward.backend`:

* `rule`: the answer metric named by `reward.metric` (see `mmrag.metrics.answers`);
* `hf_classifier`: a sequence classifier reading "question: .. answer: .. reference: ..";
* `lvlm_judge`: a frozen LVLM asked whether the candidate answer is correct,
  scored as P(yes) / (P(yes) + P(no)) from its next-token distribution.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

import torch

from mmrag.config import RewardConfig
from mmrag.metrics.answers import METRICS

JUDGE_PROMPT = (
    "Question: {question}\nReference answer: {reference}\nCandidate answer: {answer}\n"
    "Is the candidate answer correct? Answer yes or no."
)
# The judge's reply may open with any of these spellings; their probabilities are pooled.
YES_SPELLINGS = ("yes", " yes", "Yes", " Yes")
NO_SPELLINGS = ("no", " no", "No", " No")
REFERENCE_SEPARATOR = " | "


class RewardScorer(Protocol):
    def score(
        self, questions: Sequence[str], answers: Sequence[str], references: Sequence[Sequence[str]]
    ) -> list[float]: ...


def _check_aligned(questions: Sequence, answers: Sequence, references: Sequence) -> None:
    if not len(questions) == len(answers) == len(references):
        raise ValueError(
            f"reward score: questions, answers and references must have one entry per example, "
            f"got {len(questions)}, {len(answers)} and {len(references)}"
        )


def _join_references(references: Sequence[str]) -> str:
    return REFERENCE_SEPARATOR.join(str(reference) for reference in references)


class RuleReward:
    """The answer metric named by `reward.metric`; the question is not read."""

    def __init__(self, metric: str):
        if metric not in METRICS:
            raise ValueError(f"reward.metric: unknown metric {metric!r} (valid: {', '.join(METRICS)})")
        self.metric = METRICS[metric]

    def score(self, questions, answers, references) -> list[float]:
        _check_aligned(questions, answers, references)
        return [self.metric(answer, refs) for answer, refs in zip(answers, references)]


class BatchedModelReward(ABC):
    """Runs a model backend over the examples `batch_size` at a time, without gradients."""

    def __init__(self, batch_size: int):
        if batch_size < 1:
            raise ValueError(f"reward.batch_size: must be at least 1, got {batch_size}")
        self.batch_size = batch_size

    def score(self, questions, answers, references) -> list[float]:
        _check_aligned(questions, answers, references)
        scores: list[float] = []
        with torch.inference_mode():
            for start in range(0, len(answers), self.batch_size):
                batch = slice(start, start + self.batch_size)
                scores.extend(self.score_batch(questions[batch], answers[batch], references[batch]))
        return scores

    @abstractmethod
    def score_batch(self, questions, answers, references) -> list[float]:
        """Scores for one batch of at most `batch_size` examples."""


class ClassifierReward(BatchedModelReward):
    """An HF sequence classifier: sigmoid of its one logit, or the softmax probability of its last label."""

    def __init__(self, model_path: str, batch_size: int, dtype: str = "float32", device: str = "cpu"):
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from mmrag.models.lvlm import TORCH_DTYPES

        super().__init__(batch_size)
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(model_path, dtype=TORCH_DTYPES[dtype])
        self.model.to(device).eval()
        if self.tokenizer.pad_token is None:
            # Decoder-only classifiers (GPT-2 style) ship without a pad token; batching needs one.
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.model.config.pad_token_id = self.tokenizer.eos_token_id
        positions = getattr(self.model.config, "max_position_embeddings", None) or self.tokenizer.model_max_length
        self.max_length = min(self.tokenizer.model_max_length, positions)

    def score_batch(self, questions, answers, references) -> list[float]:
        texts = [
            f"question: {question} answer: {answer} reference: {_join_references(refs)}"
            for question, answer, refs in zip(questions, answers, references)
        ]
        encoded = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        logits = self.model(**encoded).logits.float()
        if logits.shape[-1] == 1:
            probabilities = torch.sigmoid(logits[:, 0])
        else:
            probabilities = torch.softmax(logits, dim=-1)[:, -1]
        return probabilities.tolist()


def _first_token_ids(tokenizer, spellings: Sequence[str]) -> set[int]:
    """The first token of each spelling: the judge's next token when it replies with that word."""
    return {tokenizer.encode(spelling, add_special_tokens=False)[0] for spelling in spellings}


class LvlmJudgeReward(BatchedModelReward):
    """A frozen LVLM judging correctness from a text-only prompt.

    score = P(yes) / (P(yes) + P(no)), where P(yes) sums the next-token probabilities
    of the first tokens of the YES_SPELLINGS (likewise for no); for a tokenizer that
    keeps each spelling whole (Qwen2's does) these are the words' exact probabilities.
    """

    def __init__(self, model_ref: str, cache_dir: str, batch_size: int, dtype: str = "float32", device: str = "cpu"):
        from mmrag.models.lvlm import load_lvlm

        super().__init__(batch_size)
        self.device = device
        self.model, self.processor = load_lvlm(model_ref, cache_dir, dtype=dtype, device=device)
        self.model.eval()
        tokenizer = self.processor.tokenizer
        yes_ids = _first_token_ids(tokenizer, YES_SPELLINGS)
        no_ids = _first_token_ids(tokenizer, NO_SPELLINGS)
        if yes_ids & no_ids:
            raise ValueError(
                f"reward.model: {model_ref!r} tokenizes 'yes' and 'no' to a shared first token; "
                f"lvlm_judge needs a tokenizer that tells them apart"
            )
        self.yes_ids = torch.tensor(sorted(yes_ids), device=device)
        self.no_ids = torch.tensor(sorted(no_ids), device=device)

    def prompts(self, questions, answers, references) -> list[str]:
        """The judge's user prompts (text only; `chat_inputs` wraps them in the chat template)."""
        return [
            JUDGE_PROMPT.format(question=question, reference=_join_references(refs), answer=answer)
            for question, answer, refs in zip(questions, answers, references)
        ]

    def next_token_logits(self, prompts: list[str]) -> torch.Tensor:
        """Logits of the assistant's first reply token; prompts are left-padded, so it is the last position."""
        from mmrag.models.lvlm import chat_inputs

        inputs = chat_inputs(self.processor, [None] * len(prompts), prompts).to(self.device)
        return self.model(**inputs, logits_to_keep=1).logits[:, -1].float()

    def score_batch(self, questions, answers, references) -> list[float]:
        log_probs = torch.log_softmax(self.next_token_logits(self.prompts(questions, answers, references)), dim=-1)
        log_p_yes = torch.logsumexp(log_probs[:, self.yes_ids], dim=-1)
        log_p_no = torch.logsumexp(log_probs[:, self.no_ids], dim=-1)
        # P(yes) / (P(yes) + P(no)) == sigmoid(log P(yes) - log P(no)), without underflow.
        return torch.sigmoid(log_p_yes - log_p_no).tolist()


def build_reward(cfg: RewardConfig, cache_dir: str, device: str = "cpu") -> RewardScorer:
    """The scorer for `cfg.backend`; model references may be HF ids, paths or `zoo:NAME`."""
    if cfg.backend == "rule":
        return RuleReward(cfg.metric)
    if cfg.backend not in ("hf_classifier", "lvlm_judge"):
        raise ValueError(f"reward.backend: unknown backend {cfg.backend!r} (valid: rule, hf_classifier, lvlm_judge)")
    if not cfg.model:
        raise ValueError(f"reward.model: the {cfg.backend} backend needs a model (HF id, local path or zoo:NAME)")
    if cfg.backend == "hf_classifier":
        from mmrag.zoo import resolve

        return ClassifierReward(resolve(cfg.model, cache_dir), cfg.batch_size, cfg.dtype, device)
    return LvlmJudgeReward(cfg.model, cache_dir, cfg.batch_size, cfg.dtype, device)
