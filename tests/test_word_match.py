"""Word-level match of what the visual reader reads against each document, and how the reranker carries it."""

from __future__ import annotations

import pytest
import torch

from mmrag.config import RerankerConfig
from mmrag.data.render import render_entity
from mmrag.data.wording import ATTRIBUTES
from mmrag.data.world import Entity
from mmrag.models.clip_encoder import ClipEncoder
from mmrag.models.clip_architectures import TINY_CLIP_MODEL_NAME
from mmrag.models.reranker import AdaptiveReranker, Candidate
from mmrag.models.similarity_head import FEATURE_NAMES, relational_features
from mmrag.models.word_match import WordMatcher, words_of

READING = {"colour": "red", "shape": "circle", "texture": "striped", "background": "grey"}


@pytest.fixture(scope="module")
def matcher(zoo_dir) -> WordMatcher:
    """On the v2 retriever's model, fitted on a wording with the KB's synonyms (never on its templates)."""
    return WordMatcher(ClipEncoder(TINY_CLIP_MODEL_NAME, "zoo:tiny-clip-v2", zoo_dir))


def test_words_are_lower_case_letter_runs():
    assert words_of("Construction of Ada Lind (a red disc, banded) ended in 1542.") == [
        "construction", "of", "ada", "lind", "a", "red", "disc", "banded", "ended", "in"]


def test_each_attribute_word_scores_its_best_match_in_the_document(matcher):
    texts = ["Ada Lind, a red circle with a striped finish, set against grey, dates from 1542.", "", "x"]
    match = matcher.match([READING], [texts], num_slots=4)
    assert tuple(match.shape) == (1, 4, len(ATTRIBUTES))
    # Every attribute word occurs verbatim in the first document: its own cosine, 1.
    assert torch.allclose(match[0, 0], torch.ones(len(ATTRIBUTES)), atol=1e-5)
    # A document without words, and padding, match nothing.
    assert match[0, 1].abs().sum() == 0 and match[0, 3].abs().sum() == 0
    assert match[0, 2].abs().sum() > 0


def test_a_synonym_matches_better_than_another_texture(matcher):
    """The near-duplicate that decides: the pictured entity's passage says "banded", its sibling's "dotted"."""
    texts = ["Ada Lind, a red disc with a banded finish, set against gray.",
             "Bo Lind, a red disc with a dotted finish, set against gray."]
    texture = ATTRIBUTES.index("texture")
    match = matcher.match([READING], [texts], num_slots=2)
    assert match[0, 0, texture] > match[0, 1, texture] + 0.2


def test_the_cache_gives_the_vectors_the_text_tower_gives(matcher):
    first = matcher.vectors(["striped", "banded"])
    again = matcher.vectors(["banded", "striped"])
    assert torch.equal(first, again.flip(0))
    fresh = torch.from_numpy(matcher.encoder.encode_texts(["striped"]))[0]
    assert torch.allclose(first[0], fresh, atol=1e-6)


def test_the_reranker_carries_the_match_to_its_similarity_head(zoo_dir):
    torch.manual_seed(0)
    cfg = RerankerConfig(backbone_pretrained="zoo:tiny-clip-v2", hidden_dim=32)
    reranker = AdaptiveReranker.from_config(cfg, zoo_dir)
    pictured = Entity("e0", "Ada Lind", "circle", "red", "striped", "grey")
    image = render_entity(pictured)
    reading = reranker.visual_reader.read([image])[0]
    candidates = [[Candidate("Ada Lind, a red disc with a banded finish, set against gray.", 0.3),
                   Candidate("Bo Lind, a red disc with a dotted finish, set against gray.", 0.3)]]
    batch = reranker.featurize([image], ["When was this built?"], ["a query"], candidates)
    expected = reranker.word_matcher.match([reading], [[c.text for c in candidates[0]]], num_slots=2)
    assert torch.allclose(batch.word_match, expected)
    features = relational_features(reranker.candidate_features(batch))
    columns = [FEATURE_NAMES.index(f"word~{a}") for a in ATTRIBUTES]
    assert torch.allclose(features[0, :, columns], expected[0] * 10.0, atol=1e-5)
    # Untrained, the head's output layer is zero: the feature changes nothing until training weighs it.
    assert reranker.head(reranker.candidate_features(batch)).abs().sum() == 0


def test_without_a_visual_reader_the_match_is_zero(zoo_dir):
    cfg = RerankerConfig(backbone_pretrained="zoo:tiny-clip-init", hidden_dim=32, visual_reader="")
    reranker = AdaptiveReranker.from_config(cfg, zoo_dir)
    batch = reranker.featurize([render_entity(Entity("e0", "A B", "circle", "red", "plain", "grey"))],
                               ["When was this built?"], ["q"], [[Candidate("a red circle", 0.1)]])
    assert tuple(batch.word_match.shape) == (1, 1, len(ATTRIBUTES)) and batch.word_match.abs().sum() == 0
