"""The reranker head that generalises across entities: it reads relations between vectors, never the vectors.

`reranker.head: similarity` (the default). A head over raw CLIP features memorises entities (fitted on gold
labels, the MLP head's val top-1 fell below retrieval order: docs/LEARNING.md). This one scores candidate j
from entity-agnostic inputs only:

* the cosine similarity of each query-side vector (question image, question text, translated query, and the
  visual reader's description of the question image: what tells near-duplicates apart) with the document's text,
  image and fused vectors, and each of those minus its best value in the candidate list;
* a learned low-rank (16) bilinear match of the question text with the document text (which relation it states;
  the one input that projects a document vector, so the one that could memorise; without it the gold-label
  top-1 on val was 0.318 instead of 0.386);
* the retrieval score's gap to the top score, the rank (one-hot, capped), whether the document has an image;
* redundancy: its highest text and fused similarity to a higher-ranked candidate (near-duplicates);
* for each attribute word the visual reader reads (colour, shape, texture, background), its best cosine with a
  word of the document, and that minus its best in the list (`mmrag.models.word_match`): what tells the pictured
  entity's passages from its near-duplicates' (fitted on gold labels, val top-1 0.589 without these inputs,
  0.738 with them; docs/LEARNING.md);

and one non-relational input, the question text's vector: question templates are shared by every entity, so
it tells the kind of demand (visual, one fact, two facts). It conditions the candidate scorer (concatenated
as a small embedding) and is all the STOP scorer reads, through an MLP: STOP can then learn "keep nothing
for a visual question, one passage for one fact, two for two". The output layer starts at zero, so an
untrained reranker ranks like the retriever and keeps its top 2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mmrag.data.wording import ATTRIBUTES
from mmrag.models.reranker_head import CandidateFeatures, score_output_layer

SIMILARITY_SCALE = 10.0
"""Cosine similarities and score gaps are multiplied by this: tiny-clip's differences between candidates are a
few hundredths, about the size an MLP's inputs should be times ten."""

RANK_BINS = 8
"""One-hot retrieval rank; ranks from RANK_BINS - 1 on share the last bin."""

RELATION_RANK = 16
"""Dimensions of the learned question-document text match."""

KIND_DIM = 16
"""Size of the question-text embedding that conditions the candidate scorer."""

QUERY_SIDE = ("question_image", "question", "query", "seen")
DOC_SIDE = ("text", "image", "fused")
SIMILARITY_NAMES = tuple(f"{q}~{d}" for q in QUERY_SIDE for d in DOC_SIDE)
"""Cosine similarity of each query-side vector with each of the document's vectors, in `relational_features`
order (query-side major)."""

WORD_MATCH_NAMES = tuple(f"word~{attribute}" for attribute in ATTRIBUTES)
"""Each attribute word the visual reader reads, its best cosine with a word of the document (`word_match`)."""

FEATURE_NAMES = (*SIMILARITY_NAMES, *(f"{name}-best" for name in SIMILARITY_NAMES), "has_image", "score-top",
                 *(f"rank{r}" for r in range(RANK_BINS)), "redundancy_text", "redundancy_fused",
                 *WORD_MATCH_NAMES, *(f"{name}-best" for name in WORD_MATCH_NAMES))
"""The fixed inputs per candidate, in order (`X-best`: X minus its maximum over the candidate list)."""

CANDIDATE_FEATURES = len(FEATURE_NAMES) + RELATION_RANK
"""Per candidate: the fixed inputs and the learned relation match."""


def demand(features: CandidateFeatures) -> torch.Tensor:
    """[B, D]: the question text's unit vector times sqrt(D), coordinates of about unit size: what STOP reads. At
    unit norm the STOP MLP's hidden units start near 0.05, an Adam step at lr 3e-3 moved STOP by about 0.02
    logits, and in 60 steps STOP learned only a shared "keep more" (visual questions kept 2.7-2.9 on val); at
    this scale it learned to keep 0.4-1.3 on visual questions and 2.8 on fact questions (docs/LEARNING.md). The
    candidate scorer's kind embedding reads the unit vector: at this scale it fitted train better and val
    worse (gold-label top-1 on val 0.365 against 0.386)."""
    question = features.query[:, 1]
    return question * math.sqrt(question.shape[-1])


def max_or_zero(values: torch.Tensor, allowed: torch.Tensor, dim: int, keepdim: bool = False) -> torch.Tensor:
    """The maximum of `values` over `dim` among the entries `allowed` (broadcast against them); 0 where none is."""
    best = values.masked_fill(~allowed, float("-inf")).amax(dim=dim, keepdim=keepdim)
    return torch.where(torch.isfinite(best), best, torch.zeros_like(best))


def masked_max(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, K, F] over the real candidates (`mask` [B, K]) -> [B, 1, F]; 0 for a row without any."""
    return max_or_zero(values, mask.unsqueeze(-1), dim=1, keepdim=True)


def redundancy(vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, K, D] -> [B, K]: each candidate's highest cosine similarity to a real higher-ranked candidate (0 for
    the first)."""
    similarity = vectors @ vectors.transpose(1, 2)  # [B, K (this), K (other)]
    num = vectors.shape[1]
    higher = torch.ones(num, num, dtype=torch.bool, device=vectors.device).tril(diagonal=-1)
    return max_or_zero(similarity, higher.unsqueeze(0) & mask.unsqueeze(1), dim=2)


def relational_features(features: CandidateFeatures) -> torch.Tensor:
    """[B, K, len(FEATURE_NAMES)]: every fixed entity-agnostic input of candidate j (zeros at padding)."""
    mask = features.mask
    doc_vectors = torch.stack([features.doc_text, features.doc_image, features.docs], dim=2)  # [B, K, 3, D]
    query_side = torch.cat([features.query, features.seen.unsqueeze(1)], dim=1)  # [B, 4, D], QUERY_SIDE order
    similarities = torch.einsum("bqd,bkvd->bkqv", query_side, doc_vectors).flatten(2) * SIMILARITY_SCALE
    relative = similarities - masked_max(similarities, mask)
    words = features.word_match * SIMILARITY_SCALE
    scores = features.retrieval_scores.unsqueeze(-1)
    gap = (scores - masked_max(scores, mask)) * SIMILARITY_SCALE
    rank = torch.arange(mask.shape[1], device=mask.device).clamp(max=RANK_BINS - 1)
    rank_one_hot = F.one_hot(rank, RANK_BINS).to(similarities.dtype).expand(mask.shape[0], -1, -1)
    repeated = torch.stack([redundancy(features.doc_text, mask), redundancy(features.docs, mask)], dim=-1)
    has_image = features.has_image.unsqueeze(-1).to(similarities.dtype)
    inputs = torch.cat([similarities, relative, has_image, gap, rank_one_hot, repeated * SIMILARITY_SCALE,
                        words, words - masked_max(words, mask)], dim=-1)
    return inputs * mask.unsqueeze(-1)


class SimilarityScoringHead(nn.Module):
    """MLP over [relational features, relation match, question-text embedding] per candidate."""

    def __init__(self, feature_dim: int, hidden_dim: int):
        super().__init__()
        self.question_relation = nn.Linear(feature_dim, RELATION_RANK, bias=False)
        self.doc_relation = nn.Linear(feature_dim, RELATION_RANK, bias=False)
        self.kind_embedding = nn.Sequential(nn.Linear(feature_dim, KIND_DIM), nn.GELU())
        self.mlp = nn.Sequential(
            nn.Linear(CANDIDATE_FEATURES + KIND_DIM, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            score_output_layer(hidden_dim),
        )
        self.stop_input_dim, self.stop_hidden_dim = feature_dim, hidden_dim

    @staticmethod
    def stop_inputs(features: CandidateFeatures) -> torch.Tensor:
        """[B, D]: the question text's `demand` vector, all STOP reads besides its anchor."""
        return demand(features)

    def forward(self, features: CandidateFeatures) -> torch.Tensor:
        """-> score correction [B, K]."""
        if features.mask.shape[1] == 0:  # no row has a candidate: nothing to score (and no maximum to take)
            return features.retrieval_scores.new_zeros(features.mask.shape)
        question = features.query[:, 1]
        match = self.question_relation(question).unsqueeze(1) * self.doc_relation(features.doc_text)
        kind = self.kind_embedding(question).unsqueeze(1).expand(-1, features.mask.shape[1], -1)
        inputs = torch.cat([relational_features(features), match, kind], dim=-1)
        return self.mlp(inputs).squeeze(-1)
