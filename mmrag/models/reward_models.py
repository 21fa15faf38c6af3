"""The reward backends that run a model (`reward.backend` `hf_classifier` and `lvlm_judge`).

Built by `mmrag.models.reward.build_reward`, which imports this module only for them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from mmrag.models.batches import check_batch_lengths
from mmrag.models.lvlm import TORCH_DTYPES, chat_inputs, load_lvlm, sequence_logprobs

JUDGE_PROMPT = (
    "Question: {question}\nReference answer: {reference}\nCandidate answer: {answer}\n"
    "Is the candidate answer correct? Answer yes or no."
)
# The judge's reply may open with any of these spellings; their probabilities are pooled.
YES_SPELLINGS = ("yes", " yes", "Yes", " Yes")
NO_SPELLINGS = ("no", " no", "No", " No")
REFERENCE_SEPARATOR = " | "


def _join_references(references: Sequence[str]) -> str:
    return REFERENCE_SEPARATOR.join(str(reference) for reference in references)


class BatchedModelReward(ABC):
    """Runs a model backend over the examples `batch_size` at a time, without gradients."""

    def __init__(self, batch_size: int):
        if batch_size < 1:
            raise ValueError(f"reward.batch_size: must be at least 1, got {batch_size}")
        self.batch_size = batch_size

    def score(self, questions, answers, references) -> list[float]:
        check_batch_lengths(questions=questions, answers=answers, references=references)
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


def _token_paths(tokenizer, spellings: Sequence[str]) -> list[tuple[int, ...]]:
    return [tuple(tokenizer.encode(spelling, add_special_tokens=False)) for spelling in spellings]


def _check_prefix_free(paths: list[tuple[int, ...]], model_ref: str) -> None:
    """Replies starting with two different spellings must be disjoint events for their probabilities to add."""
    for index, path in enumerate(paths):
        for other in paths[index + 1 :]:
            shorter, longer = sorted((path, other), key=len)
            if longer[: len(shorter)] == shorter:
                raise ValueError(
                    f"reward.model: {model_ref!r} tokenizes two of the judge's yes/no spellings so that one "
                    f"({list(shorter)}) is a prefix of another ({list(longer)}); lvlm_judge cannot tell them apart"
                )


class LvlmJudgeReward(BatchedModelReward):
    """A frozen LVLM judging correctness from a text-only prompt.

    score = P(yes) / (P(yes) + P(no)), where P(yes) sums, over YES_SPELLINGS, the
    probability that the reply starts with that spelling's tokens (likewise for no).
    A one-token spelling's probability is read from the next-token distribution (all
    of them, for Qwen2's tokenizer); a spelling the tokenizer splits is scored token
    by token with `sequence_logprobs`.
    """

    def __init__(self, model_ref: str, cache_dir: str, batch_size: int, dtype: str = "float32", device: str = "cpu"):
        super().__init__(batch_size)
        self.device = device
        self.model, self.processor = load_lvlm(model_ref, cache_dir, dtype=dtype, device=device)
        self.yes_paths = _token_paths(self.processor.tokenizer, YES_SPELLINGS)
        self.no_paths = _token_paths(self.processor.tokenizer, NO_SPELLINGS)
        _check_prefix_free(self.yes_paths + self.no_paths, model_ref)

    def prompts(self, questions, answers, references) -> list[str]:
        """The judge's user prompts (text only; `chat_inputs` wraps them in the chat template)."""
        return [
            JUDGE_PROMPT.format(question=question, reference=_join_references(refs), answer=answer)
            for question, answer, refs in zip(questions, answers, references)
        ]

    def next_token_logprobs(self, prompts: list[str]) -> torch.Tensor:
        """Log-probs of the assistant's first reply token; prompts are left-padded, so it is the last position."""
        inputs = chat_inputs(self.processor, [None] * len(prompts), prompts).to(self.device)
        return torch.log_softmax(self.model(**inputs, logits_to_keep=1).logits[:, -1].float(), dim=-1)

    def reply_logprobs(self, prompts: list[str], paths: list[tuple[int, ...]], first_token: torch.Tensor) -> torch.Tensor:
        """[batch, len(paths)]: log P(reply starts with path | prompt)."""
        columns = [
            first_token[:, path[0]] if len(path) == 1
            else sequence_logprobs(self.model, self.processor, [None] * len(prompts), prompts, [list(path)] * len(prompts))
            for path in paths
        ]
        return torch.stack([column.float().to(first_token.device) for column in columns], dim=1)

    def score_batch(self, questions, answers, references) -> list[float]:
        prompts = self.prompts(questions, answers, references)
        first_token = self.next_token_logprobs(prompts)
        log_p_yes = torch.logsumexp(self.reply_logprobs(prompts, self.yes_paths, first_token), dim=1)
        log_p_no = torch.logsumexp(self.reply_logprobs(prompts, self.no_paths, first_token), dim=1)
        # P(yes) / (P(yes) + P(no)) == sigmoid(log P(yes) - log P(no)), without underflow.
        return torch.sigmoid(log_p_yes - log_p_no).tolist()
