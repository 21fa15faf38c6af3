"""Adaptive reranker: scores retrieved candidates plus a learned STOP item, and picks evidence.

Sits between retrieval and the generator. For each (question image, question, translated
query) and its K retrieved candidates it computes Plackett-Luce logits [K + 1] (STOP last):

    candidate j:  (retrieval_score_j + sight_j) / score_temperature + head(features)_j
    STOP:         anchor(candidate logits) + stop_scorer(head.stop_inputs(features))

over features from an open_clip backbone (`ClipEncoder`): the question image, the question
and query texts, each document's text and image vectors, and what a frozen visual reader (the
grounded generator's eye, `reranker.visual_reader`) sees in the question image, described in
the backbone's own wording and embedded by its text tower, and how well each word it reads is
matched by a word of each document (`mmrag.models.word_match`) (`CandidateFeatures`). The
head's and the STOP scorer's output layers start at zero, so an untrained reranker ranks by
the prior: the retrieval score plus `sight`, the cosine of the document's text with what the
visual reader sees (0 without a reader, which then ranks like the retriever). Read at k = 5,
that prior orders the caption+question candidates better than retrieval does on world v2's val
(`mmrag.evaluation.baselines.sight_reordered`: 0.556 against 0.444): training starts from it
instead of having to find it.

With `reranker.gate`, a retrieval gate (`mmrag.models.reranker_head.RetrievalGate`) decides apart from
STOP whether to keep anything at all: greedy keeps nothing where it would rather skip, else the ranking's
selection. Training rollouts take both of its arms on every query (the empty selection and M - 1 ranking
draws), and the gate learns from their values (`mmrag.rl.losses.gate_loss`).

The STOP anchor (our choice, see `mmrag.models.reranker_head.stop_anchor`) is the midpoint
between the 2nd- and 3rd-highest candidate logits: greedy decoding of an untrained reranker
keeps exactly the top 2 candidates; sampling at temperature 1 keeps 1.6-2.3 on average with
max_docs = 3 (fewer when the top candidates stand out).

Rollouts call `featurize` then `sample` (training) or `greedy` (inference); the learner
calls `policy` and `logprob` on the sampled selections. With `backbone: frozen` all CLIP features are
computed once in `featurize` (no grad) and cached in the `RerankBatch`; with `backbone: lora`
the batch keeps the text tokens and `logits` re-encodes them through the LoRA-tuned text
tower with gradients (image features stay cached: only the text tower is adapted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Protocol

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from mmrag.config import RerankerConfig
from mmrag.data.dataset import decode_image
from mmrag.data.wording import ATTRIBUTES
from mmrag.model_refs import resolve
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.models.reranker_head import (CandidateFeatures, CrossAttentionScoringHead, MlpScoringHead, RetrievalGate,
                                        StopScorer)
from mmrag.models.similarity_head import SimilarityScoringHead
from mmrag.models.visual_reader import VisualReader, load_visual_reader, seen_description
from mmrag.models.word_match import WordMatcher
from mmrag.rl.plackett_luce import Selection, greedy_selection, sample_selections, selection_logprobs

TEXT_TOWER_MLP = r"(text\.)?transformer\.resblocks\.\d+\.mlp\.(c_fc|c_proj)"
"""PEFT target: the MLP linears of the open_clip text tower (`visual.*` never matches)."""


class RetrievedDocument(Protocol):
    """What the reranker reads of a retrieval hit (`mmrag.retrieval` hits have these fields)."""

    text: str
    score: float
    image: bytes | None


@dataclass
class Candidate:
    """One retrieved document as the reranker sees it."""

    text: str
    """The document text the retriever embedded."""
    retrieval_score: float
    """The retriever's inner-product score for this query."""
    image: Image.Image | None = None
    """The document's image, if it has one."""

    @classmethod
    def from_hit(cls, hit: RetrievedDocument) -> Candidate:
        """From a retrieval hit (its image bytes decoded)."""
        return cls(hit.text, hit.score, None if hit.image is None else decode_image(hit.image))


def candidates_of(hits: Sequence[Sequence[RetrievedDocument]]) -> list[list[Candidate]]:
    """Rows of retrieval hits as the reranker's candidates (images decoded)."""
    return [[Candidate.from_hit(hit) for hit in row] for row in hits]


@dataclass
class RerankBatch:
    """Featurized queries and candidates; K is the longest candidate list, shorter ones padded."""

    retrieval_scores: torch.Tensor
    """[B, K] float; 0 at padding."""
    mask: torch.Tensor
    """[B, K] bool; True where a candidate is real, False at padding."""
    image_features: torch.Tensor
    """[B, 1 + K, D]: question image, then each document's image (zeros where it has none)."""
    seen_features: torch.Tensor
    """[B, D]: the visual reader's description of the question image, embedded without gradients; zeros without one."""
    word_match: torch.Tensor
    """[B, K, 4]: each attribute word the visual reader reads, its best cosine with a word of the document
    (`mmrag.models.word_match`); zeros without a reader and at padding."""
    text_features: torch.Tensor | None
    """[B, 2 + K, D]: question, query, documents (zeros at padding); set with a frozen backbone."""
    text_tokens: torch.Tensor | None
    """[T, L] tokens of the real texts in row-major order of `text_mask`; set with a LoRA backbone."""

    @property
    def text_mask(self) -> torch.Tensor:
        """[B, 2 + K] bool: which of question, query, documents are real texts."""
        question_and_query = torch.ones(len(self), 2, dtype=torch.bool, device=self.mask.device)
        return torch.cat([question_and_query, self.mask], dim=1)

    def __len__(self) -> int:
        return self.mask.shape[0]

    def to(self, device: torch.device | str) -> RerankBatch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        return RerankBatch(**{k: None if v is None else v.to(device) for k, v in moved.items()})


def _scatter_rows(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Place `values` [n, D] at the True entries of `mask` [B, S] -> [B, S, D], zeros elsewhere."""
    out = values.new_zeros(*mask.shape, values.shape[-1])
    return out.masked_scatter(mask.unsqueeze(-1), values)


class AdaptiveReranker(nn.Module):
    """CLIP features + trainable head + STOP scorer -> Plackett-Luce policy over candidates."""

    def __init__(self, encoder: ClipEncoder, cfg: RerankerConfig, visual_reader: VisualReader | None = None):
        super().__init__()
        if cfg.max_docs < 0:
            raise ValueError(f"reranker.max_docs: expected an int >= 0, got {cfg.max_docs}")
        if not cfg.score_temperature > 0:
            raise ValueError(f"reranker.score_temperature: expected > 0, got {cfg.score_temperature}")
        self.encoder = encoder
        self.visual_reader = None if visual_reader is None else visual_reader.requires_grad_(False)
        self.backbone = encoder.model
        self.backbone.requires_grad_(False)
        self.tunes_text_tower = cfg.backbone == "lora"
        if self.tunes_text_tower:
            _add_text_tower_lora(self.backbone, cfg)
        self.word_matcher = WordMatcher(encoder, cache=not self.tunes_text_tower)
        self.max_docs = cfg.max_docs
        self.score_temperature = cfg.score_temperature
        self.head = scoring_head(cfg.head, encoder.dim, cfg.hidden_dim)
        self.stop_scorer = StopScorer(self.head.stop_input_dim, self.head.stop_hidden_dim)
        self.gate = RetrievalGate(self.head.stop_input_dim, cfg.gate_skip_prior) if cfg.gate else None
        self.to(encoder.device)

    @classmethod
    def from_config(cls, cfg: RerankerConfig, cache_dir: str, device: str = "cpu") -> AdaptiveReranker:
        """Load the backbone named by `reranker.backbone_name` / `backbone_pretrained` and the visual reader named
        by `reranker.visual_reader` (none when empty), and build the policy."""
        reader = load_visual_reader(resolve(cfg.visual_reader, cache_dir)) if cfg.visual_reader else None
        return cls(ClipEncoder(cfg.backbone_name, cfg.backbone_pretrained, cache_dir, device), cfg, reader)

    @property
    def device(self) -> torch.device:
        return self.encoder.device

    def featurize(self, images: Sequence[Image.Image], questions: Sequence[str], queries: Sequence[str],
                  candidates: Sequence[Sequence[Candidate]]) -> RerankBatch:
        """One row per (question image, question, query, candidate list); no gradients."""
        _check_same_length(images=images, questions=questions, queries=queries, candidates=candidates)
        num_slots = max((len(row) for row in candidates), default=0)
        mask = torch.tensor([[j < len(row) for j in range(num_slots)] for row in candidates],
                            dtype=torch.bool).reshape(len(candidates), num_slots)
        scores = torch.tensor([[float(c.retrieval_score) for c in row] + [0.0] * (num_slots - len(row))
                               for row in candidates], dtype=torch.float32).reshape(mask.shape)
        readings = self.visual_reader.read(list(images)) if self.visual_reader is not None else None
        batch = RerankBatch(scores, mask, self._image_features(images, candidates, num_slots),
                            self._seen_features(readings, len(images)),
                            self._word_match(readings, candidates, num_slots), None, None)
        texts = [text for question, query, row in zip(questions, queries, candidates)
                 for text in [question, query, *(c.text for c in row)]]
        if self.tunes_text_tower:
            batch.text_tokens = self.encoder.tokenizer(texts)
        else:
            encoded = torch.from_numpy(self.encoder.encode_texts(texts))
            batch.text_features = _scatter_rows(encoded, batch.text_mask)
        return batch.to(self.device)

    def _image_features(self, images: Sequence[Image.Image], candidates: Sequence[Sequence[Candidate]],
                        num_slots: int) -> torch.Tensor:
        """[B, 1 + K, D]: question image, then document images (zeros where none)."""
        has_image = torch.tensor([[True] + [j < len(row) and row[j].image is not None for j in range(num_slots)]
                                  for row in candidates], dtype=torch.bool).reshape(len(candidates), 1 + num_slots)
        pictures = [picture for image, row in zip(images, candidates)
                    for picture in [image, *(c.image for c in row if c.image is not None)]]
        return _scatter_rows(torch.from_numpy(self.encoder.encode_images(pictures)), has_image)

    def _seen_features(self, readings: list[dict[str, str]] | None, rows: int) -> torch.Tensor:
        """[B, D]: the text vector of `seen_description` of each reading, zeros without a visual reader.
        Computed once here without gradients, also under LoRA (by the tower as adapted then): a query-side
        vector, like the question image's."""
        if readings is None:
            return torch.zeros(rows, self.encoder.dim)
        descriptions = [seen_description(reading) for reading in readings]
        return torch.from_numpy(self.encoder.encode_texts(descriptions)).reshape(rows, self.encoder.dim)

    def _word_match(self, readings: list[dict[str, str]] | None, candidates: Sequence[Sequence[Candidate]],
                    num_slots: int) -> torch.Tensor:
        """[B, K, 4]: `WordMatcher.match` of each reading against its candidates, zeros without a visual reader.
        Like `_seen_features`, computed once here without gradients."""
        if readings is None:
            return torch.zeros(len(candidates), num_slots, len(ATTRIBUTES))
        return self.word_matcher.match(readings, [[c.text for c in row] for row in candidates], num_slots)

    def seen_descriptions(self, images: Sequence[Image.Image]) -> list[str]:
        """`VisualReader.describe` of each image (the reranker needs a reader)."""
        return self.visual_reader.describe(list(images))

    def _text_features(self, batch: RerankBatch) -> torch.Tensor:
        """[B, 2 + K, D]: cached with a frozen backbone, re-encoded with gradients with LoRA."""
        if not self.tunes_text_tower:
            if batch.text_features is None:
                raise ValueError("RerankBatch.text_features is missing: this batch was featurized by a "
                                 "LoRA-backbone reranker; featurize it with this (frozen-backbone) one")
            return batch.text_features
        if batch.text_tokens is None:
            raise ValueError("RerankBatch.text_tokens is missing: this batch was featurized by a "
                             "frozen-backbone reranker; featurize it with this (LoRA-backbone) one")
        encoded = self.backbone.encode_text(batch.text_tokens, normalize=True)
        return _scatter_rows(encoded, batch.text_mask)

    def logits(self, batch: RerankBatch) -> torch.Tensor:
        """[B, K + 1] Plackett-Luce logits, STOP last, -inf at padded candidates (without the gate: `policy`)."""
        return self.policy(batch)[0]

    @torch.no_grad()
    def hit_logits(self, images: Sequence[Image.Image], questions: Sequence[str], queries: Sequence[str],
                   hits: Sequence[Sequence[RetrievedDocument]]) -> torch.Tensor:
        """`logits` of retrieval hits, without gradients."""
        return self.logits(self.featurize(images, questions, queries, candidates_of(hits)))

    def policy(self, batch: RerankBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(`logits` [B, K + 1], the gate's skip logits [B], or None without `reranker.gate`)."""
        features = self.candidate_features(batch)
        prior = batch.retrieval_scores + features.sight
        candidate = prior / self.score_temperature + self.head(features)
        stop_inputs = self.head.stop_inputs(features)
        stop = self.stop_scorer(stop_inputs, candidate, batch.mask)
        gate = None if self.gate is None else self.gate(stop_inputs)
        candidate = candidate.masked_fill(~batch.mask, float("-inf"))
        return torch.cat([candidate, stop.unsqueeze(1)], dim=1), gate

    def candidate_features(self, batch: RerankBatch) -> CandidateFeatures:
        """What the head reads of a batch (text vectors re-encoded with gradients under a LoRA backbone)."""
        texts = self._text_features(batch)
        query = torch.stack([batch.image_features[:, 0], texts[:, 0], texts[:, 1]], dim=1)
        return CandidateFeatures(query, texts[:, 2:], batch.image_features[:, 1:], batch.retrieval_scores, batch.mask,
                                 batch.seen_features, batch.word_match)

    @torch.no_grad()
    def sample(self, batch: RerankBatch, m: int, temperature: float = 1.0,
               generator: torch.Generator | None = None) -> tuple[list[list[Selection]], list[list[float]]]:
        """m selections per row at `temperature`, and their log-probs under the policy that drew them.

        Without a gate, m Plackett-Luce draws. With one, both of the gate's arms on every row: first the empty
        selection (the skip arm, its log-prob log sigmoid(gate / T)), then m - 1 Plackett-Luce draws (the retrieve
        arm, each with its ranking log-prob): the gate is trained on the two arms' values (`gate_loss`), which a
        sampled skip decision would hide once its probability nears 0 or 1.
        """
        logits, gate = self.policy(batch)
        draws = m if gate is None else m - 1
        if draws < 1:
            raise ValueError(f"sample: with a gate, m (reranker.num_samples) must be at least 2 (the skip arm and "
                             f"one draw), got {m}")
        selections = [sample_selections(row_logits, draws, self.max_docs, temperature, generator, row_mask)
                      for row_logits, row_mask in zip(logits, batch.mask)]
        rows = [row for row, drawn in enumerate(selections) for _ in drawn]
        flat = [selection for drawn in selections for selection in drawn]
        index = torch.tensor(rows, dtype=torch.long, device=logits.device)
        ranked = selection_logprobs(logits[index] / temperature, flat, self.max_docs, batch.mask[index]).tolist()
        logprobs = [ranked[row * draws:(row + 1) * draws] for row in range(len(selections))]
        if gate is None:
            return selections, logprobs
        skip = F.logsigmoid(gate / temperature).tolist()
        return [[(), *drawn] for drawn in selections], [[s, *lp] for s, lp in zip(skip, logprobs)]

    def logprob(self, batch: RerankBatch, selections: Sequence[Selection], rows: Sequence[int],
                temperature: float = 1.0, logits: torch.Tensor | None = None) -> torch.Tensor:
        """Differentiable Plackett-Luce log-prob [N] of selections[i], drawn for batch row rows[i], at `temperature`
        (with a gate: the ranking's, given that the gate retrieves); `logits`: this batch's `policy` logits when
        the caller already has them (the gated loss, which also needs the gate's), so the head runs once."""
        if len(selections) != len(rows):
            raise ValueError(f"logprob: {len(selections)} selections but {len(rows)} rows (one row index each)")
        bad = [row for row in rows if not 0 <= row < len(batch)]
        if bad:
            raise ValueError(f"logprob: row index {bad[0]} out of range for a batch of {len(batch)} rows")
        index = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        logits = self.logits(batch) if logits is None else logits
        return selection_logprobs(logits[index] / temperature, selections, self.max_docs, batch.mask[index])

    @torch.no_grad()
    def greedy(self, batch: RerankBatch) -> list[Selection]:
        """Per row: nothing where the gate (if any) would rather skip, else candidates by descending logit, kept
        while they beat STOP, at most max_docs."""
        logits, gate = self.policy(batch)
        skips = [False] * len(batch) if gate is None else (gate > 0).tolist()
        return [() if skip else greedy_selection(row_logits, self.max_docs, row_mask)
                for row_logits, row_mask, skip in zip(logits, batch.mask, skips)]

    def trainable_modules(self) -> nn.ModuleDict:
        """The submodules that own every trainable weight: head, STOP scorer, any gate and any LoRA adapters.

        What an optimiser wrapper such as a DeepSpeed engine should own. The frozen backbone
        stays outside it, replicated: ZeRO-3 would otherwise partition CLIP weights that
        open_clip reads outside any submodule's forward (its projections, MultiheadAttention's
        out_proj), and CLIP's 0-dim logit_scale cannot be broadcast.
        """
        owners = {}
        for name, module in self.named_modules():
            inside_owner = any(name.startswith(f"{owner}.") for owner in owners)
            if not inside_owner and any(p.requires_grad for p in module.parameters(recurse=False)):
                owners[name] = module
        return nn.ModuleDict({name.replace(".", "/"): module for name, module in owners.items()})

    def trainable_parameters(self) -> list[nn.Parameter]:
        """What an optimiser updates: the trainable weights of `trainable_modules`."""
        return [p for p in self.trainable_modules().parameters() if p.requires_grad]

    def parameter_groups(self, lr: float, gate_lr: float | None = None) -> list[dict]:
        """Optimiser param groups over the trainable weights: all at `lr`, or with `gate_lr` the gate's at that."""
        trainable = self.trainable_parameters()
        if self.gate is None or gate_lr is None:
            return [{"params": trainable, "lr": lr}]
        gate = list(self.gate.parameters())
        rest = [p for p in trainable if all(p is not q for q in gate)]
        return [{"params": rest, "lr": lr}, {"params": gate, "lr": gate_lr}]

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """CPU copies of the trained parameters only (head, STOP scorer, gate, LoRA adapters): for weight sync."""
        return {name: p.detach().cpu().clone() for name, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy in a `trainable_state_dict()` from a policy with the same config."""
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        missing, unexpected = sorted(params.keys() - state.keys()), sorted(state.keys() - params.keys())
        if missing or unexpected:
            raise ValueError(f"reranker weights: missing keys {missing[:3]}, unexpected keys {unexpected[:3]} "
                             "(expected the trainable_state_dict of a reranker with the same config)")
        with torch.no_grad():
            for name, param in params.items():
                if state[name].shape != param.shape:
                    raise ValueError(f"reranker weights: {name} has shape {tuple(state[name].shape)}, "
                                     f"expected {tuple(param.shape)}")
                param.copy_(state[name])


def scoring_head(kind: str, feature_dim: int, hidden_dim: int) -> nn.Module:
    """The head named by `reranker.head`."""
    if kind == "similarity":
        return SimilarityScoringHead(feature_dim, hidden_dim)
    if kind == "mlp":
        return MlpScoringHead(feature_dim, hidden_dim)
    if kind == "cross_attention":
        return CrossAttentionScoringHead(feature_dim, hidden_dim)
    raise ValueError(f"reranker.head: expected one of ['similarity', 'mlp', 'cross_attention'], got {kind!r}")


def _add_text_tower_lora(backbone: nn.Module, cfg: RerankerConfig) -> None:
    """Inject PEFT LoRA adapters into the text tower's MLP; only they become trainable."""
    import peft  # seconds to import, and only a LoRA backbone needs it

    lora = peft.LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=TEXT_TOWER_MLP)
    try:
        peft.inject_adapter_in_model(lora, backbone)
    except ValueError as exc:
        raise ValueError(f"reranker.backbone: lora found no text-tower MLP layers matching {TEXT_TOWER_MLP!r} "
                         f"in {cfg.backbone_name} ({exc})") from None


def _check_same_length(**columns: Sequence) -> None:
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"featurize: expected one entry per row in each input, got lengths {lengths}")
