"""Trainable parts of the adaptive reranker: the candidate scoring heads and the STOP scorer.

Sits between the CLIP features (`mmrag.models.reranker.AdaptiveReranker.featurize`) and the
Plackett-Luce policy: a head maps `CandidateFeatures` (query features [B, 3, D]: question image,
question text, translated query; each document's text and image vectors [B, K, D]; the retrieval
scores; the text vector of the visual reader's description of the question image [B, D]) to a
correction [B, K] that is added to the retrieval logits, and names what the STOP scorer reads
(`stop_inputs`); `StopScorer` gives the STOP item's logit, a data-dependent anchor plus a learned
offset. Every output layer starts at zero, so an untrained reranker ranks exactly by its prior (the
retrieval score, plus `sight` with a visual reader) and keeps its top 2 candidates when greedy. The relational head that generalises across entities is
`mmrag.models.similarity_head`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

QUERY_TOKENS = 3
"""Query-side feature vectors per row: question image, question text, translated query."""

KEPT_AT_START = 2
"""Candidates an untrained reranker keeps when decoding greedily (see `stop_anchor`)."""


@dataclass
class CandidateFeatures:
    """What a scoring head reads for B rows of K candidates (padding rows are zeros, `mask` False)."""

    query: torch.Tensor
    """[B, 3, D]: question image, question text, translated query (unit vectors)."""
    doc_text: torch.Tensor
    """[B, K, D]: each document's text vector."""
    doc_image: torch.Tensor
    """[B, K, D]: each document's image vector, zeros where it has none."""
    retrieval_scores: torch.Tensor
    """[B, K]: the retriever's inner-product scores, in retrieval order (0 at padding)."""
    mask: torch.Tensor
    """[B, K] bool: real candidates."""
    seen: torch.Tensor
    """[B, D]: the text vector of what the visual reader sees in the question image, described in the backbone's
    own wording (`mmrag.models.reranker.seen_description`); zeros without a reader."""
    word_match: torch.Tensor
    """[B, K, 4]: each attribute word the visual reader reads, its best cosine with a word of the document
    (`mmrag.models.word_match`); zeros without a reader."""

    @property
    def docs(self) -> torch.Tensor:
        """[B, K, D]: text and image fused by normalised mean, as the index embeds a document."""
        return F.normalize(self.doc_text + self.doc_image, dim=-1)

    @property
    def sight(self) -> torch.Tensor:
        """[B, K]: cosine of each document's text with what the visual reader sees (0 without a reader)."""
        return torch.einsum("bkd,bd->bk", self.doc_text, self.seen)

    @property
    def has_image(self) -> torch.Tensor:
        """[B, K] bool: documents with an image vector."""
        return self.doc_image.abs().sum(dim=-1) > 0


def zero_init_linear(in_features: int, out_features: int, bias: bool = True) -> nn.Linear:
    """A linear layer whose output is exactly zero until it is trained."""
    layer = nn.Linear(in_features, out_features, bias=bias)
    nn.init.zeros_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


def score_output_layer(hidden_dim: int) -> nn.Linear:
    """A head's last layer: zero at start, and without a bias. A bias would shift every candidate logit and the
    STOP anchor alike, so the policy would ignore it; its gradient would be rounding noise that Adam amplifies."""
    return zero_init_linear(hidden_dim, 1, bias=False)


def raw_query_features(features: CandidateFeatures) -> torch.Tensor:
    """[B, 3 * D]: the three query vectors, what the STOP scorer of the raw-feature heads reads."""
    return features.query.flatten(1)


class MlpScoringHead(nn.Module):
    """MLP over [q_img, q_question, q_query, d, q_img*d, q_question*d, q_query*d] per candidate (raw CLIP features:
    fitted on gold labels it memorises entities: in 1000 steps train top-1 0.30 -> 0.82, val 0.30 -> 0.19,
    `benchmarks.reranker_heads`)."""

    def __init__(self, feature_dim: int, hidden_dim: int):
        super().__init__()
        self.stop_input_dim, self.stop_hidden_dim = QUERY_TOKENS * feature_dim, None
        self.mlp = nn.Sequential(
            nn.Linear((2 * QUERY_TOKENS + 1) * feature_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            score_output_layer(hidden_dim),
        )

    stop_inputs = staticmethod(raw_query_features)

    def forward(self, features: CandidateFeatures) -> torch.Tensor:
        """-> score correction [B, K]."""
        query, docs = features.query, features.docs
        num_docs = docs.shape[1]
        query_per_doc = query.unsqueeze(1).expand(-1, num_docs, -1, -1)  # [B, K, 3, D]
        products = query_per_doc * docs.unsqueeze(2)  # [B, K, 3, D]
        inputs = torch.cat([query_per_doc.flatten(2), docs, products.flatten(2)], dim=-1)
        return self.mlp(inputs).squeeze(-1)


class CrossAttentionScoringHead(nn.Module):
    """Each document attends over the three query tokens; an MLP scores [doc, attended, doc*attended]."""

    def __init__(self, feature_dim: int, hidden_dim: int, num_heads: int = 4):
        super().__init__()
        if hidden_dim % num_heads:
            raise ValueError(f"reranker.hidden_dim: the cross_attention head needs a multiple of {num_heads}, "
                             f"got {hidden_dim}")
        self.stop_input_dim, self.stop_hidden_dim = QUERY_TOKENS * feature_dim, None
        self.query_proj = nn.Linear(feature_dim, hidden_dim)
        self.doc_proj = nn.Linear(feature_dim, hidden_dim)
        # The three query tokens live in one CLIP space; a learned type embedding lets the
        # attention tell the question image from the question and the translated query.
        self.query_type = nn.Parameter(torch.randn(QUERY_TOKENS, hidden_dim) * 0.02)
        self.attention = nn.MultiheadAttention(hidden_dim, num_heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(3 * hidden_dim, hidden_dim),
            nn.GELU(),
            score_output_layer(hidden_dim),
        )

    stop_inputs = staticmethod(raw_query_features)

    def forward(self, features: CandidateFeatures) -> torch.Tensor:
        """-> score correction [B, K]."""
        query_tokens = self.query_proj(features.query) + self.query_type
        doc_tokens = self.doc_proj(features.docs)
        attended, _ = self.attention(doc_tokens, query_tokens, query_tokens, need_weights=False)
        inputs = torch.cat([doc_tokens, attended, doc_tokens * attended], dim=-1)
        return self.mlp(inputs).squeeze(-1)


def stop_anchor(candidate_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Midpoint of the 2nd- and 3rd-highest valid candidate logits: [B, K] (+ mask [B, K]) -> [B].

    Greedy decoding keeps the candidates that beat STOP, so an untrained reranker keeps exactly
    its top `KEPT_AT_START`. A row with fewer valid candidates continues its ranking one logit
    below its lowest for each missing rank, so it keeps all of them; a row with none gets -2.5.
    """
    ranks_needed = KEPT_AT_START + 1
    valid_logits = candidate_logits.masked_fill(~mask, float("-inf"))
    ranked = F.pad(valid_logits, (0, ranks_needed), value=float("-inf")).sort(dim=1, descending=True).values
    ranked = ranked[:, :ranks_needed]
    num_valid = mask.sum(dim=1, keepdim=True)
    lowest = ranked.gather(1, (num_valid - 1).clamp(0, ranks_needed - 1))
    lowest = torch.where(num_valid > 0, lowest, torch.zeros_like(lowest))
    rank = torch.arange(ranks_needed, device=candidate_logits.device).unsqueeze(0)
    extended = torch.where(rank < num_valid, ranked, lowest - (rank + 1 - num_valid))
    return (extended[:, KEPT_AT_START - 1] + extended[:, KEPT_AT_START]) / 2


class StopScorer(nn.Module):
    """STOP logit: `stop_anchor(candidate logits)` + a learned offset of the head's `stop_inputs` + a bias.

    The offset is linear in those inputs, or with `hidden_dim` an MLP of them; its output layer (`linear`, with
    the bias) starts at zero, so training moves STOP relative to the candidates, starting from the anchor. The
    anchor is not detached: `logprob` is then the exact gradient of the policy that `sample` draws from.
    """

    def __init__(self, in_features: int, hidden_dim: int | None = None):
        super().__init__()
        self.hidden = None if hidden_dim is None else nn.Sequential(nn.Linear(in_features, hidden_dim), nn.GELU())
        self.linear = zero_init_linear(in_features if hidden_dim is None else hidden_dim, 1)

    def forward(self, inputs: torch.Tensor, candidate_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """inputs [B, F], candidate logits [B, K], mask [B, K] -> STOP logit [B]."""
        hidden = inputs if self.hidden is None else self.hidden(inputs)
        return stop_anchor(candidate_logits, mask) + self.linear(hidden).squeeze(-1)

    @torch.no_grad()
    def pin(self, offset: float) -> None:
        """Make STOP's logit the anchor + `offset` whatever the inputs (component-level training's fixed k)."""
        self.linear.weight.zero_()
        self.linear.bias.fill_(offset)


class RetrievalGate(nn.Module):
    """Logit [B] of skipping evidence altogether, linear in the head's `stop_inputs` (`reranker.gate`).

    The STOP item competes at every position of a selection, so on fact questions each "keep one more document"
    comparison pushes it down, through weights every question shares; on world v2 it ends 20 logits under the top
    candidate on visual questions too (docs/LEARNING.md). The gate answers only "any evidence at all?", and
    training evaluates both of its answers on every query (`AdaptiveReranker.sample`), fitting it to the better
    one (`mmrag.rl.losses.gate_loss`): sampled, its skip probability collapsed on every kind before the ranking
    had improved enough for skipping to pay on visual questions, and nothing drew it again. Its weights start at
    zero and its bias at the logit of `skip_prior`.
    """

    def __init__(self, in_features: int, skip_prior: float):
        super().__init__()
        if not 0 < skip_prior < 1:
            raise ValueError(f"reranker.gate_skip_prior: expected a probability in (0, 1), got {skip_prior!r}")
        self.linear = zero_init_linear(in_features, 1)
        with torch.no_grad():
            self.linear.bias.fill_(math.log(skip_prior / (1 - skip_prior)))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """inputs [B, F] -> skip logit [B]."""
        return self.linear(inputs).squeeze(-1)
