"""Adaptive reranker on the random tiny CLIP: shapes, Plackett-Luce consistency, init, training, sync, actor."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from PIL import Image

from mmrag.config import ConfigError, RerankerConfig, load_config
from mmrag.data.dataset import encode_image
from mmrag.data.render import render_entity
from mmrag.data.world import Entity
from mmrag.models.reranker import AdaptiveReranker, Candidate
from mmrag.models.visual_reader import seen_description
from mmrag.rl.losses import pl_policy_loss
from mmrag.retrieval.hit import Hit
from mmrag.rl.plackett_luce import enumerate_selections
from mmrag.training.stages import QuestionTable

IMAGES = [Image.new("RGB", (64, 64), "red"), Image.new("RGB", (64, 64), "blue")]
QUESTIONS = ["When was this built?", "Who designed this?"]
QUERIES = ["red striped circle year built", "blue square architect"]
CANDIDATES = [
    [Candidate("red striped circle was built in 1901", 0.27, Image.new("RGB", (64, 64), "red")),
     Candidate("blue square was designed by Ada Lind", 0.31),
     Candidate("green triangle is 45 metres tall", 0.29, Image.new("RGB", (64, 64), "green"))],
    [Candidate("blue square was designed by Ada Lind", 0.22)],
]
HITS = [[Hit(f"d{row}{j}", "", c.text, None if c.image is None else encode_image(c.image), "", c.retrieval_score, j)
         for j, c in enumerate(candidates)] for row, candidates in enumerate(CANDIDATES)]
"""The candidates as retrieval returns them (images as encoded bytes)."""


def make_reranker(zoo_dir: str, **fields) -> AdaptiveReranker:
    torch.manual_seed(0)  # the heads' hidden layers and LoRA's A matrices start random
    cfg = RerankerConfig(backbone_pretrained="zoo:tiny-clip-init", hidden_dim=32, **{"gate": False, **fields})
    return AdaptiveReranker.from_config(cfg, zoo_dir)


@contextmanager
def perturbed(reranker: AdaptiveReranker, seed: int = 0, scale: float = 0.5) -> Iterator[AdaptiveReranker]:
    """Every trainable parameter (zero-initialised outputs included) moved off its initial value, then restored."""
    initial = reranker.trainable_state_dict()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in reranker.parameters():
            if param.requires_grad:
                param.add_(torch.randn(param.shape, generator=generator) * scale)
    try:
        yield reranker
    finally:
        reranker.load_trainable_state_dict(initial)


def featurize(reranker: AdaptiveReranker, candidates=CANDIDATES):
    return reranker.featurize(IMAGES, QUESTIONS, QUERIES, candidates)


@pytest.fixture(scope="module")
def frozen(zoo_dir) -> AdaptiveReranker:
    """Without a visual reader (its untrained logits are the retrieval scores', hand-computed below), at most 3."""
    return make_reranker(zoo_dir, visual_reader="", max_docs=3)


@pytest.fixture(scope="module")
def gated(zoo_dir) -> AdaptiveReranker:
    """`frozen` with a retrieval gate."""
    return make_reranker(zoo_dir, visual_reader="", max_docs=3, gate=True)


@pytest.fixture(scope="module")
def sighted(zoo_dir) -> AdaptiveReranker:
    return make_reranker(zoo_dir)


@pytest.fixture(scope="module")
def lora(zoo_dir) -> AdaptiveReranker:
    return make_reranker(zoo_dir, backbone="lora", head="cross_attention", max_docs=2, visual_reader="")


def test_untrained_logits_are_retrieval_scores_and_stop_anchor(frozen):
    batch = featurize(frozen)
    assert batch.mask.tolist() == [[True, True, True], [True, False, False]]
    assert tuple(batch.image_features.shape) == (2, 4, frozen.encoder.dim)
    assert tuple(batch.text_features.shape) == (2, 5, frozen.encoder.dim)
    assert batch.text_tokens is None
    # Padding has no features; real texts are unit vectors.
    assert batch.text_features[1, 3:].abs().sum() == 0
    assert torch.allclose(batch.text_features[0].norm(dim=-1), torch.ones(5), atol=1e-5)
    logits = frozen.logits(batch)
    assert tuple(logits.shape) == (2, 4)
    # Candidates: score / 0.05. STOP: midpoint of the 2nd and 3rd (row 1: its only logit - 1.5).
    expected = torch.tensor([[5.4, 6.2, 5.8, 5.6], [4.4, -math.inf, -math.inf, 2.9]])
    assert torch.allclose(logits.detach(), expected, atol=1e-4)


def test_the_seen_vector_embeds_what_the_visual_reader_reads_in_the_question_image(sighted):
    frozen = sighted
    pictured = [Entity("e0", "Ada Lind", "circle", "red", "striped", "grey"),
                Entity("e1", "Bo Lind", "square", "blue", "dotted", "teal")]
    images = [render_entity(entity) for entity in pictured]
    batch = frozen.featurize(images, QUESTIONS, QUERIES, CANDIDATES)
    readings = frozen.visual_reader.read(images)
    expected = frozen.encoder.encode_texts([seen_description(reading) for reading in readings])
    assert torch.allclose(batch.seen_features, torch.from_numpy(expected), atol=1e-6)
    assert [seen_description(r) for r in readings][0] == "red striped circle pictured on grey"
    assert torch.equal(frozen.candidate_features(batch).seen, batch.seen_features)


def test_without_a_visual_reader_the_seen_vector_is_zero(frozen):
    assert frozen.visual_reader is None
    assert featurize(frozen).seen_features.abs().sum() == 0


def test_an_untrained_sighted_reranker_ranks_by_retrieval_score_plus_sight(sighted):
    batch = featurize(sighted)
    sight = torch.einsum("bkd,bd->bk", batch.text_features[:, 2:], batch.seen_features)
    assert sight[0].abs().min() > 0
    expected = ((batch.retrieval_scores + sight) / 0.05).masked_fill(~batch.mask, -math.inf)
    assert torch.allclose(sighted.logits(batch)[:, :-1].detach(), expected, atol=1e-4)


def test_rows_without_candidates_always_stop(frozen):
    for candidates in ([[], CANDIDATES[1]], [[], []]):
        batch = featurize(frozen, candidates)
        assert tuple(frozen.logits(batch).shape) == (2, max(len(row) for row in candidates) + 1)
        assert frozen.greedy(batch)[0] == ()
        selections, logprobs = frozen.sample(batch, 3, 1.0)
        assert selections[0] == [(), (), ()] and logprobs[0] == [0.0, 0.0, 0.0]
    assert frozen.greedy(batch) == [(), ()]


def test_candidate_from_retrieval_hit_decodes_its_image():
    picture = Image.new("RGB", (8, 6), "red")
    hit = Hit("d1", "Title", "passage", encode_image(picture), "e1", 0.42, 7)
    candidate = Candidate.from_hit(hit)
    assert (candidate.text, candidate.retrieval_score, candidate.image.size) == ("passage", 0.42, (8, 6))
    assert Candidate.from_hit(Hit("d2", "", "text only", None, "e2", 0.1, 8)).image is None


def test_untrained_greedy_follows_retrieval_order(frozen, lora):
    scores = [0.21, 0.35, 0.18, 0.33, 0.30]
    candidates = [[Candidate(f"passage {i}", s) for i, s in enumerate(scores)], CANDIDATES[1]]
    for reranker in (frozen, lora):
        assert reranker.greedy(featurize(reranker, candidates)) == [(1, 3), (0,)]


def test_untrained_sampling_keeps_about_two_documents(frozen):
    scores = [0.21, 0.35, 0.18, 0.33, 0.30]
    batch = featurize(frozen, [[Candidate(f"passage {i}", s) for i, s in enumerate(scores)], CANDIDATES[1]])
    every = enumerate_selections(len(scores), frozen.max_docs)
    probabilities = frozen.logprob(batch, every, [0] * len(every)).exp()
    expected_kept = sum(p.item() * len(s) for p, s in zip(probabilities, every))
    assert 1.6 < expected_kept < 1.9  # 1.74 for these scores with max_docs = 3
    selections, _ = frozen.sample(batch, 400, 1.0, torch.Generator().manual_seed(0))
    assert sum(len(s) for s in selections[0]) / 400 == pytest.approx(expected_kept, abs=0.15)
    # The best-scored candidate leads most often.
    assert Counter(s[0] for s in selections[0] if s).most_common(1)[0][0] == 1


@pytest.mark.parametrize("name", ["frozen", "lora", "gated"])
def test_selection_probabilities_sum_to_one(request, name):
    reranker = request.getfixturevalue(name)
    with perturbed(reranker):
        batch = featurize(reranker)
        for row, num_candidates in enumerate([3, 1]):
            selections = enumerate_selections(num_candidates, reranker.max_docs)
            for temperature in (1.0, 0.5):
                logprobs = reranker.logprob(batch, selections, [row] * len(selections), temperature)
                assert logprobs.exp().sum().item() == pytest.approx(1.0, abs=1e-5)


def plackett_luce_logprob_by_hand(logits: list[float], selection: tuple[int, ...], max_docs: int) -> float:
    """Draw by draw in plain Python: log softmax over what is still available (real candidates and STOP)."""
    stop = len(logits) - 1
    available = [i for i, logit in enumerate(logits) if logit != -math.inf]
    draws = list(selection) + ([stop] if len(selection) < max_docs else [])
    total = 0.0
    for drawn in draws:
        total += logits[drawn] - math.log(sum(math.exp(logits[i]) for i in available))
        available.remove(drawn)
    return total


def test_sampled_logprobs_match_recomputation(lora):
    """What `sample` reports is the log-prob under logits / T, recomputed independently here."""
    with perturbed(lora):
        batch = featurize(lora)
        selections, logprobs = lora.sample(batch, 8, 0.7, torch.Generator().manual_seed(3))
        scaled = (lora.logits(batch).detach() / 0.7).tolist()
    assert [len(drawn) for drawn in selections] == [8, 8]
    assert all(isinstance(s, tuple) and len(s) <= 2 for drawn in selections for s in drawn)
    assert len(set(selections[0])) > 1  # several different selections checked, not one
    for row, drawn in enumerate(selections):
        expected = [plackett_luce_logprob_by_hand(scaled[row], s, lora.max_docs) for s in drawn]
        assert logprobs[row] == pytest.approx(expected, abs=1e-5), (row, drawn)


def test_padding_is_never_selected_and_frequencies_match_probabilities(lora):
    with perturbed(lora, scale=0.1):
        batch = featurize(lora)
        selections, _ = lora.sample(batch, 600, 1.0, torch.Generator().manual_seed(4))
        greedy = lora.greedy(batch)
        probabilities = {s: lora.logprob(batch, [s], [row]).exp().item()
                         for row, s in [(1, ()), (0, (1,)), (0, (1, 2))]}
    assert set(selections[1]) <= {(), (0,)}
    assert greedy[1] in {(), (0,)}
    assert selections[1].count(()) / 600 == pytest.approx(probabilities[()], abs=0.06)
    for selection in [(1,), (1, 2)]:
        assert selections[0].count(selection) / 600 == pytest.approx(probabilities[selection], abs=0.06)


def test_an_untrained_gate_leaves_the_ranking_and_greedy_unchanged(frozen, gated):
    batch = featurize(gated)
    assert torch.equal(gated.logits(batch), frozen.logits(batch))  # the same head and STOP, untrained
    assert gated.greedy(batch) == frozen.greedy(batch) == [(1, 2), (0,)]
    assert torch.equal(gated.logprob(batch, [(), (1, 2)], [0, 0]), frozen.logprob(batch, [(), (1, 2)], [0, 0]))
    assert torch.sigmoid(gated.policy(batch)[1]).tolist() == pytest.approx([0.15, 0.15], abs=1e-6)
    assert frozen.policy(batch)[1] is None  # no gate


def test_gated_sampling_takes_both_arms_and_draws_the_rest_from_the_ranking(frozen, gated):
    with perturbed(gated, scale=0.1):
        batch = featurize(gated)
        selections, logprobs = gated.sample(batch, 801, 0.7, torch.Generator().manual_seed(5))
        skip = torch.nn.functional.logsigmoid(gated.policy(batch)[1] / 0.7).tolist()
        every = enumerate_selections(3, gated.max_docs)
        probabilities = dict(zip(every, gated.logprob(batch, every, [0] * len(every), 0.7).exp().tolist()))
        recomputed = gated.logprob(batch, selections[0][1:], [0] * 800, 0.7).tolist()
    assert [row[0] for row in selections] == [(), ()]  # the skip arm, on every row
    assert [row[0] for row in logprobs] == pytest.approx(skip, abs=1e-6)
    draws = selections[0][1:]
    assert probabilities[()] > 0.1  # STOP first: the ranking may draw nothing too
    for selection in [(), (1,), (1, 2)]:
        assert draws.count(selection) / 800 == pytest.approx(probabilities[selection], abs=0.05), selection
    assert logprobs[0][1:] == pytest.approx(recomputed, abs=1e-5)
    with pytest.raises(ValueError, match="must be at least 2"):
        gated.sample(batch, 1)


def test_greedy_keeps_nothing_where_the_gate_would_rather_skip(gated):
    batch = featurize(gated)
    with perturbed(gated, scale=0.0):
        with torch.no_grad():
            gated.gate.linear.bias.fill_(0.1)  # skip probability just above 1/2
        assert gated.greedy(batch) == [(), ()]
        with torch.no_grad():
            gated.gate.linear.bias.fill_(-0.1)
        assert gated.greedy(batch) == [(1, 2), (0,)]


def test_the_gate_learns_at_its_own_rate_and_the_rest_at_the_rerankers(gated):
    groups = gated.parameter_groups(1e-3, gate_lr=0.1)
    assert [group["lr"] for group in groups] == [1e-3, 0.1]
    assert sum(len(group["params"]) for group in groups) == len(gated.trainable_state_dict())
    assert gated.parameter_groups(1e-3) == [{"params": groups[0]["params"] + groups[1]["params"], "lr": 1e-3}]
    with perturbed(gated, scale=0.0):
        before = gated.trainable_state_dict()
        optimizer = torch.optim.AdamW(groups, weight_decay=0.0)
        logits, skip = gated.policy(featurize(gated))
        (skip.sum() + logits[:, -1].sum()).backward()  # the gate's bias and STOP's both get a gradient
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        moved = {name: (p - before[name]).abs().max().item() for name, p in gated.trainable_state_dict().items()}
    assert moved["gate.linear.bias"] == pytest.approx(0.1, rel=1e-3)  # Adam's first step: lr x sign(grad)
    assert 0 < max(step for name, step in moved.items() if not name.startswith("gate.")) <= 1e-3 * (1 + 1e-3)


def test_the_gate_prior_must_be_a_probability(zoo_dir):
    with pytest.raises(ConfigError, match="reranker.gate_skip_prior"):
        load_config(None, ["reranker.gate_skip_prior=1.0"])
    with pytest.raises(ValueError, match="reranker.gate_skip_prior: expected a probability in"):
        make_reranker(zoo_dir, visual_reader="", gate=True, gate_skip_prior=0.0)


def test_frozen_backbone_has_no_trainable_parameters(frozen):
    assert not any(p.requires_grad for p in frozen.backbone.parameters())
    names = list(frozen.trainable_state_dict())
    assert names and all(name.startswith(("head.", "stop_scorer.")) for name in names)


def test_lora_trains_only_text_tower_adapters_and_head(lora):
    trainable = [name for name, p in lora.named_parameters() if p.requires_grad]
    adapters = [name for name in trainable if name.startswith("backbone.")]
    # 3 text layers x (c_fc, c_proj) x (lora_A, lora_B); nothing in the vision tower.
    assert len(adapters) == 12
    assert all(".lora_" in name and not name.startswith("backbone.visual") for name in adapters)
    assert all(name.startswith(("head.", "stop_scorer.")) for name in set(trainable) - set(adapters))
    assert sorted(lora.trainable_state_dict()) == sorted(trainable)
    # Once the head is off zero, gradients reach the adapters: logits() re-encodes the texts.
    with perturbed(lora):
        lora.zero_grad()
        lora.logprob(featurize(lora), [(1, 0)], [0]).sum().backward()
        adapter_grads = [p.grad for n, p in lora.named_parameters() if n in adapters]
    assert all(g is not None for g in adapter_grads)
    assert sum(g.abs().sum().item() for g in adapter_grads) > 0


@pytest.mark.parametrize("name", ["frozen", "lora", "gated"])
def test_trainable_modules_own_every_trainable_weight_and_nothing_frozen(request, name):
    reranker = request.getfixturevalue(name)
    owned = list(reranker.trainable_modules().parameters())
    trainable = [p for p in reranker.parameters() if p.requires_grad]
    assert {id(p) for p in owned} == {id(p) for p in trainable}
    assert len(owned) == len(trainable)  # no weight owned twice


@pytest.mark.parametrize("name", ["frozen", "lora", "gated"])
def test_sgd_step_follows_the_sign_of_the_advantage(request, name):
    reranker = request.getfixturevalue(name)
    batch = featurize(reranker)
    initial = reranker.trainable_state_dict()
    selection = (2, 0)  # not the greedy (1, 2)
    before = reranker.logprob(batch, [selection], [0]).item()
    for advantage in (1.0, -1.0):
        optimizer = torch.optim.SGD([p for p in reranker.parameters() if p.requires_grad], lr=0.05)
        loss = pl_policy_loss(reranker.logprob(batch, [selection], [0]), torch.tensor([advantage]))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        after = reranker.logprob(batch, [selection], [0]).item()
        reranker.load_trainable_state_dict(initial)
        assert (after - before) * advantage > 1e-3, (advantage, before, after)


def test_weight_sync_round_trip(lora):
    batch = featurize(lora)
    initial = lora.trainable_state_dict()
    untrained = lora.logits(batch).detach()
    with perturbed(lora):
        trained = lora.logits(batch).detach()
        state = lora.trainable_state_dict()
    restored = lora.logits(batch).detach()
    lora.load_trainable_state_dict(state)
    synced = lora.logits(batch).detach()
    lora.load_trainable_state_dict(initial)
    assert not torch.allclose(trained, untrained)
    assert torch.allclose(restored, untrained) and torch.allclose(synced, trained, atol=1e-6)
    state.pop("stop_scorer.linear.bias")
    with pytest.raises(ValueError, match=r"missing keys \['stop_scorer.linear.bias'\]"):
        lora.load_trainable_state_dict(state)


def test_batch_from_other_backbone_mode_is_rejected(frozen, lora):
    with pytest.raises(ValueError, match="text_tokens is missing"):
        lora.logits(featurize(frozen))


def test_actor_samples_with_the_weights_each_call_names(ray_session, zoo_dir, frozen):
    from mmrag.actors.policy import PolicyWeights
    from mmrag.actors.reranker import RerankerActor

    # `frozen`'s config: the weights it installs must mean the same to the actor (no visual reader, 3 documents,
    # no gate).
    cfg = RerankerConfig(backbone_pretrained="zoo:tiny-clip-init", hidden_dim=32, visual_reader="", max_docs=3,
                         gate=False)
    actor = ray_session.remote(RerankerActor).remote(cfg, zoo_dir)
    table, rows = QuestionTable(IMAGES, QUESTIONS, [[], []]), [0, 1]
    initial = PolicyWeights(0, ())
    drawn = ray_session.get(actor.sample.remote(table, rows, QUERIES, HITS, 5, 11, initial))
    assert drawn.policy_version == 0
    assert [len(row) for row in drawn.selections] == [5, 5]
    assert all(math.isfinite(lp) and lp <= 0 for row in drawn.logprobs for lp in row)
    assert ray_session.get(actor.sample.remote(table, rows, QUERIES, HITS, 5, 11, initial)) == drawn
    with perturbed(frozen):
        expected = frozen.greedy(featurize(frozen))
        version_3 = PolicyWeights(3, (ray_session.put(frozen.trainable_state_dict()),))
    assert expected != frozen.greedy(featurize(frozen)), "else installing the weights could go unnoticed"
    assert ray_session.get(actor.greedy.remote(table, rows, QUERIES, HITS, version_3)) == expected
    assert ray_session.get(actor.sample.remote(table, rows, QUERIES, HITS, 5, 11, version_3)).policy_version == 3
    ray_session.kill(actor)
