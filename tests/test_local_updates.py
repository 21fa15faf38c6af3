"""Local losses through mmrag/training/updates.py, against numbers worked by hand.

Reranker: an untrained one (tiny-clip-init) ranks exactly by retrieval score, so its
Plackett-Luce logits are known by hand: candidate score / 0.05, STOP the midpoint of the
2nd and 3rd candidate logits. The STOP scorer's bias adds to the STOP logit alone, so
its gradient is d loss / d logit_STOP, also worked by hand. Translator: zoo:tiny-lvlm,
each query's log-prob recomputed on its own, one row per call, and DPO by its formula.
Covers the off-policy correction (ratio exactly 1 on-policy, truncated when stale,
recomputed at the sampling temperature) and the learning signals in `LocalLoss.stats`.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from PIL import Image

from mmrag.config import LoraConfig, RerankerConfig, TrainConfig, TranslatorConfig
from mmrag.data.dataset import Question
from mmrag.models import lvlm
from mmrag.models.reranker import AdaptiveReranker
from mmrag.models.translator import QueryTranslator
from mmrag.retrieval.hit import Hit
from mmrag.rl.rollout import Node, backprop_values, compute_advantages
from mmrag.training.updates import reranker_loss, translator_loss

QUESTION = Question("q0", Image.new("RGB", (64, 64), (200, 30, 30)), "When was this built?", ["1901"])
HITS = [Hit(f"d{i}", "", text, None, f"e{i}", score, i) for i, (text, score) in enumerate(
    [("red striped circle was built in 1901", 0.30), ("blue square was built in 1850", 0.25),
     ("green triangle is 45 metres tall", 0.20)])]
TEMPERATURE = 2.0
STEP_1 = [3.0, 2.5, 2.0, 2.25]
"""Logits / temperature of the untrained reranker: scores / 0.05 = 6, 5, 4; STOP (5 + 4) / 2 = 4.5."""
RATIO_CAP = 2.0


def logsumexp(*values: float) -> float:
    return math.log(sum(math.exp(v) for v in values))


# Selection (0,) then STOP (max_docs 2, no visual reader: logits from the retrieval scores alone), and the empty
# selection, at temperature 2.
LOGPROB_FIRST = STEP_1[0] - logsumexp(*STEP_1) + STEP_1[3] - logsumexp(*STEP_1[1:])
LOGPROB_EMPTY = STEP_1[3] - logsumexp(*STEP_1)
# d log P / d (logit_STOP / T): minus P(STOP) at each draw it could have taken, plus 1 where it was drawn.
STOP_FIRST, STOP_SECOND = math.exp(STEP_1[3] - logsumexp(*STEP_1)), math.exp(STEP_1[3] - logsumexp(*STEP_1[1:]))
STOP_GRAD_FIRST, STOP_GRAD_EMPTY = -STOP_FIRST + 1 - STOP_SECOND, 1 - STOP_FIRST


@pytest.fixture(scope="module")
def reranker(zoo_dir) -> AdaptiveReranker:
    torch.manual_seed(0)
    return AdaptiveReranker.from_config(reranker_config(), zoo_dir)


def reranker_config() -> RerankerConfig:
    return RerankerConfig(backbone_pretrained="zoo:tiny-clip-init", hidden_dim=32, max_docs=2, visual_reader="",
                          gate=False)


def reranker_tree(version: int, behaviour_logprobs: tuple[float | None, float | None] = (None, None)) -> Node:
    """One query; its selections (0,) rewarded 1 and () rewarded 0: advantages +0.5 and -0.5."""
    root = Node("root", output=QUESTION.id, policy_version=version, payload={"question": QUESTION})
    query = root.add(Node("translator", output="red striped circle", policy_version=version,
                          payload={"hits": HITS}))
    for selection, reward, logprob in zip([(0,), ()], [1.0, 0.0], behaviour_logprobs):
        query.add(Node("reranker", output=selection, logprob=logprob, policy_version=version, reward=reward))
    backprop_values(root)
    compute_advantages(root)
    return root


def stop_bias_grad(reranker: AdaptiveReranker, local) -> float:
    reranker.zero_grad()
    local.loss.backward()
    return reranker.stop_scorer.linear.bias.grad.item()


def test_reranker_policy_loss_on_policy_by_hand_with_importance_ratio_exactly_one(reranker):
    local = reranker_loss(reranker, [reranker_tree(version=3)], TrainConfig(), TEMPERATURE, policy_version=3)
    assert local.examples == 2
    # -mean(A * log P): -(0.5 * LOGPROB_FIRST - 0.5 * LOGPROB_EMPTY) / 2.
    assert local.loss.item() == pytest.approx(-(0.5 * LOGPROB_FIRST - 0.5 * LOGPROB_EMPTY) / 2, abs=1e-5)
    assert local.stats == {"importance_ratio_mean": 1.0, "importance_ratio_std": 0.0, "importance_ratio_truncated": 0.0,
                           "behaviour_kl": 0.0}
    expected_grad = -(0.5 * STOP_GRAD_FIRST - 0.5 * STOP_GRAD_EMPTY) / 2 / TEMPERATURE
    assert stop_bias_grad(reranker, local) == pytest.approx(expected_grad, abs=1e-5)


@pytest.mark.parametrize("correction", [True, False])
def test_stale_reranker_selections_are_weighted_by_their_truncated_ratio(reranker, correction):
    # Drawn by version 1; the learner is at version 2. Since then (0,) became 3x and () 0.5x as likely.
    tree = reranker_tree(version=1, behaviour_logprobs=(LOGPROB_FIRST - math.log(3.0), LOGPROB_EMPTY + math.log(2.0)))
    cfg = TrainConfig(importance_ratio_cap=RATIO_CAP, behaviour_kl_coef=0.0)
    local = reranker_loss(reranker, [tree], cfg, TEMPERATURE, policy_version=2, off_policy_correction=correction)
    weights = (2.0, 0.5) if correction else (1.0, 1.0)  # ratio 3 truncated at the cap 2
    expected = -(weights[0] * 0.5 * LOGPROB_FIRST - weights[1] * 0.5 * LOGPROB_EMPTY) / 2
    assert local.loss.item() == pytest.approx(expected, abs=1e-5)
    # The ratios are logged whether or not they weight the loss: mean (3 + 0.5) / 2, spread |3 - 0.5| / 2 (the
    # standard deviation of two values), half above the cap.
    assert local.stats == pytest.approx({"importance_ratio_mean": 1.75, "importance_ratio_std": 1.25,
                                         "importance_ratio_truncated": 0.5, "behaviour_kl": STALE_KL}, abs=1e-5)
    expected_grad = -(weights[0] * 0.5 * STOP_GRAD_FIRST - weights[1] * 0.5 * STOP_GRAD_EMPTY) / 2 / TEMPERATURE
    assert stop_bias_grad(reranker, local) == pytest.approx(expected_grad, abs=1e-5)


STALE_LOG_RATIOS = (math.log(3.0), -math.log(2.0))
STALE_KL = (STALE_LOG_RATIOS[0] ** 2 + STALE_LOG_RATIOS[1] ** 2) / 2 / 2
"""behaviour_kl of the stale tree: the mean of (log pi - log mu)^2 / 2 over its two selections."""


@pytest.mark.parametrize("coef", [0.0, 0.7])
def test_behaviour_kl_penalty_pulls_stale_selections_back_and_leaves_on_policy_ones_alone(reranker, coef):
    tree = reranker_tree(version=1, behaviour_logprobs=(LOGPROB_FIRST - math.log(3.0), LOGPROB_EMPTY + math.log(2.0)))
    cfg = TrainConfig(importance_ratio_cap=RATIO_CAP, behaviour_kl_coef=coef)
    local = reranker_loss(reranker, [tree], cfg, TEMPERATURE, policy_version=2)
    policy = -(2.0 * 0.5 * LOGPROB_FIRST - 0.5 * 0.5 * LOGPROB_EMPTY) / 2
    assert local.loss.item() == pytest.approx(policy + coef * STALE_KL, abs=1e-5)
    assert local.stats["behaviour_kl"] == pytest.approx(STALE_KL, abs=1e-5)
    # d/d bias of coef * mean((log pi - log mu)^2 / 2) = coef * mean((log pi - log mu) * d log pi / d bias).
    policy_grad = -(2.0 * 0.5 * STOP_GRAD_FIRST - 0.5 * 0.5 * STOP_GRAD_EMPTY) / 2 / TEMPERATURE
    penalty_grad = (STALE_LOG_RATIOS[0] * STOP_GRAD_FIRST + STALE_LOG_RATIOS[1] * STOP_GRAD_EMPTY) / 2 / TEMPERATURE
    assert stop_bias_grad(reranker, local) == pytest.approx(policy_grad + coef * penalty_grad, abs=1e-5)
    # Drawn by the version being trained: value and gradient exactly those without the penalty.
    on_policy = reranker_loss(reranker, [reranker_tree(version=2)], cfg, TEMPERATURE, policy_version=2)
    plain = reranker_loss(reranker, [reranker_tree(version=2)], TrainConfig(behaviour_kl_coef=0.0), TEMPERATURE,
                          policy_version=2)
    assert on_policy.loss.item() == plain.loss.item()
    assert on_policy.stats["behaviour_kl"] == 0.0
    assert stop_bias_grad(reranker, on_policy) == stop_bias_grad(reranker, plain)


@pytest.mark.parametrize("coef", [0.0, 0.7])
def test_pairwise_reranker_pair_weighs_the_product_of_its_two_ratios_and_takes_the_behaviour_penalty(reranker, coef):
    tree = reranker_tree(version=1, behaviour_logprobs=(LOGPROB_FIRST - math.log(3.0), LOGPROB_EMPTY + math.log(2.0)))
    cfg = TrainConfig(reranker_loss="pairwise", dpo_beta=0.5, importance_ratio_cap=RATIO_CAP, behaviour_kl_coef=coef)
    local = reranker_loss(reranker, [tree], cfg, TEMPERATURE, policy_version=2)
    # log P((0,)) = -2.0141 < log P(()) = -1.6448: the untrained reranker still ranks the pair wrong.
    margin = 0.5 * (LOGPROB_FIRST - LOGPROB_EMPTY)
    assert margin == pytest.approx(-0.18467, abs=1e-5)
    # One pair ((0,) over ()), weight min(3 * 0.5, 2) = 1.5; the penalty is over the pair's two selections, the
    # same two as the policy loss's, so its value is STALE_KL here too.
    assert local.examples == 1
    assert local.loss.item() == pytest.approx(1.5 * math.log1p(math.exp(-margin)) + coef * STALE_KL, abs=1e-5)
    assert local.stats == pytest.approx({"importance_ratio_mean": 1.5, "importance_ratio_std": 0.0,
                                         "importance_ratio_truncated": 0.0, "behaviour_kl": STALE_KL,
                                         "reward_margin": margin, "pair_accuracy": 0.0}, abs=1e-5)
    # d/d bias of 1.5 * softplus(-margin): -1.5 * sigmoid(-margin) * 0.5 * (d log P((0,)) - d log P(())).
    sigmoid = 1 / (1 + math.exp(margin))
    pair_grad = -1.5 * sigmoid * 0.5 * (STOP_GRAD_FIRST - STOP_GRAD_EMPTY) / TEMPERATURE
    penalty_grad = (STALE_LOG_RATIOS[0] * STOP_GRAD_FIRST + STALE_LOG_RATIOS[1] * STOP_GRAD_EMPTY) / 2 / TEMPERATURE
    assert stop_bias_grad(reranker, local) == pytest.approx(pair_grad + coef * penalty_grad, abs=1e-5)


def test_stale_node_without_behaviour_logprob_is_named(reranker):
    with pytest.raises(ValueError, match=r"reranker node \(0,\) drawn by policy version 1 .* no behaviour log-prob"):
        reranker_loss(reranker, [reranker_tree(version=1)], TrainConfig(), TEMPERATURE, policy_version=2)


def test_a_gated_reranker_adds_its_gates_loss_on_the_two_arms_to_the_rankings(zoo_dir, reranker):
    torch.manual_seed(0)
    gated = AdaptiveReranker.from_config(dataclasses.replace(reranker_config(), gate=True), zoo_dir)
    root = reranker_tree(version=3)
    query = root.children[0]
    draws, query.children = query.children, []
    query.add(Node("gate", output="skip")).add(Node("reranker", output=(), policy_version=3, reward=1.0))
    query.add(Node("gate", output="retrieve")).children.extend(draws)
    backprop_values(root)
    compute_advantages(root)
    local = reranker_loss(gated, [root], TrainConfig(gate_gap_unit=None), TEMPERATURE, policy_version=3)
    # The ranking's two draws as without a gate, and the gate's one query: skipping (1.0) beat retrieving (0.5),
    # so its loss, weighed by the regret, is 0.5 * -log sigmoid(skip logit), the untrained logit being that of
    # reranker.gate_skip_prior.
    ranking = -(0.5 * LOGPROB_FIRST - 0.5 * LOGPROB_EMPTY) / 2
    assert local.examples == 3
    assert local.loss.item() == pytest.approx((2 * ranking + 0.5 * -math.log(0.15)) / 3, abs=1e-5)
    assert local.stats == pytest.approx({"importance_ratio_mean": 1.0, "importance_ratio_std": 0.0,
                                         "importance_ratio_truncated": 0.0, "behaviour_kl": 0.0, "gate_queries": 1 / 3,
                                         "gate_skip_wins": 1.0})
    gated.zero_grad()
    local.loss.backward()
    assert gated.gate.linear.bias.grad.item() == pytest.approx(0.5 * (0.15 - 1) / 3, abs=1e-6)
    # With train.gate_gap_unit 0.25 the gap of 0.5 weighs fully.
    unit = reranker_loss(gated, [root], TrainConfig(gate_gap_unit=0.25), TEMPERATURE, policy_version=3)
    assert unit.loss.item() == pytest.approx((2 * ranking + 1.0 * -math.log(0.15)) / 3, abs=1e-5)


def test_a_batch_where_only_the_gate_has_signal_takes_the_gates_loss_alone(zoo_dir):
    torch.manual_seed(0)
    gated = AdaptiveReranker.from_config(dataclasses.replace(reranker_config(), gate=True), zoo_dir)
    root = reranker_tree(version=1)
    query = root.children[0]
    query.children = []
    query.add(Node("gate", output="skip")).add(Node("reranker", output=(), policy_version=1, reward=0.0))
    retrieve = query.add(Node("gate", output="retrieve"))
    for selection in [(0,), (1,)]:  # the draws tie: no ranking example
        retrieve.add(Node("reranker", output=selection, logprob=-1.0, policy_version=1, reward=1.0))
    backprop_values(root)
    compute_advantages(root)
    local = reranker_loss(gated, [root], TrainConfig(), TEMPERATURE, policy_version=2)  # stale, as under a lag
    assert local.examples == 1
    assert local.loss.item() == pytest.approx(1.0 * -math.log(0.85), abs=1e-5)  # retrieving won by 1
    assert local.stats == pytest.approx({"importance_ratio_mean": 1.0, "importance_ratio_std": 0.0,
                                         "importance_ratio_truncated": 0.0, "behaviour_kl": 0.0, "gate_queries": 1.0,
                                         "gate_skip_wins": 0.0})


def gate_only_tree(reward: float) -> Node:
    """One query whose every leaf earns `reward`: the empty selection under skip, two one-document draws (each at
    a document's price, 0.02) under retrieve."""
    root = reranker_tree(version=1)
    query = root.children[0]
    query.children = []
    query.add(Node("gate", output="skip")).add(Node("reranker", output=(), policy_version=1, reward=reward))
    retrieve = query.add(Node("gate", output="retrieve"))
    for selection in [(0,), (1,)]:
        retrieve.add(Node("reranker", output=selection, logprob=-1.0, policy_version=1, reward=reward, cost=0.02))
    backprop_values(root)
    compute_advantages(root)
    return root


def test_a_query_no_leaf_answers_gives_the_gate_no_signal(zoo_dir):
    """Both arms failing differ by the documents' price alone, which says nothing of which arm answers: such a query
    is left out of the gate's loss. Both answering differ by the price too, and there keeping none is right (a
    visual question), so that query teaches the gate to skip."""
    torch.manual_seed(0)
    gated = AdaptiveReranker.from_config(dataclasses.replace(reranker_config(), gate=True), zoo_dir)
    missed, answered = gate_only_tree(0.0), gate_only_tree(1.0)
    assert reranker_loss(gated, [missed], TrainConfig(), TEMPERATURE, policy_version=1).examples == 0
    kept = reranker_loss(gated, [answered], TrainConfig(), TEMPERATURE, policy_version=1)
    assert kept.examples == 1 and kept.stats["gate_skip_wins"] == 1.0
    assert kept.loss.item() == pytest.approx(-math.log(0.15), abs=1e-5)  # a price of one unit weighs fully


@pytest.fixture(scope="module")
def tiny_lvlm_path(zoo_dir) -> str:
    from mmrag.zoo import resolve

    return resolve("zoo:tiny-lvlm", zoo_dir)


@pytest.fixture(scope="module")
def trained_lora_translator(tiny_lvlm_path, zoo_dir) -> QueryTranslator:
    """A LoRA translator whose adapters moved off zero: policy and reference (the bare base) differ."""
    cfg = TranslatorConfig(model=tiny_lvlm_path, max_new_tokens=8, lora=LoraConfig(enabled=True, rank=4, alpha=8),
                           query_template="{response}")
    translator = QueryTranslator.from_config(cfg, zoo_dir)
    generator = torch.Generator().manual_seed(0)
    translator.load_trainable_state_dict({name: t + 0.3 * torch.randn(t.shape, generator=generator)
                                          for name, t in translator.trainable_state_dict().items()})
    return translator


def translator_tree(query_values: list[tuple[str, float]], version: int = 0) -> Node:
    root = Node("root", output=QUESTION.id, policy_version=version, payload={"question": QUESTION})
    for query, value in query_values:
        root.add(Node("translator", output=query, value=value, policy_version=version))
    return root


def logprob_by_row(model, processor, translator: QueryTranslator, query: str) -> float:
    """One query's log-prob in a call of its own (no batching, no padding)."""
    with torch.no_grad():
        return lvlm.sequence_logprobs(model, processor, [QUESTION.image], translator.prompts([QUESTION.question]),
                                      [query], 1.0, translator.cfg.max_new_tokens).item()


@pytest.mark.parametrize("loss_name", ["dpo", "dpo_reference_free"])
def test_translator_dpo_loss_and_stats_by_hand(trained_lora_translator, tiny_lvlm_path, zoo_dir, loss_name):
    translator = trained_lora_translator
    # A drawn twice (1.0 and 0.0) is one query worth 0.5, tied with B: pairs (A, C) and (B, C) only.
    tree = translator_tree([("red circle", 1.0), ("red circle", 0.0), ("red square", 0.5), ("navy", 0.0)])
    cfg = TrainConfig(translator_loss=loss_name, dpo_beta=0.5)
    local = translator_loss(translator, [tree], cfg)
    base = QueryTranslator.from_config(dataclasses.replace(translator.cfg, lora=LoraConfig()), zoo_dir)
    policy = {q: logprob_by_row(translator.model, translator.processor, translator, q)
              for q in ("red circle", "red square", "navy")}
    reference = {q: logprob_by_row(base.model, base.processor, base, q) if loss_name == "dpo" else 0.0
                 for q in policy}
    margins = [0.5 * ((policy[c] - reference[c]) - (policy["navy"] - reference["navy"]))
               for c in ("red circle", "red square")]
    assert local.examples == 2
    expected = sum(math.log1p(math.exp(-m)) for m in margins) / 2
    assert local.loss.item() == pytest.approx(expected, abs=1e-4)
    assert local.stats == pytest.approx({"reward_margin": sum(margins) / 2,
                                         "pair_accuracy": sum(m > 0 for m in margins) / 2}, abs=1e-4)
    # DPO takes stale pairs as they are: the loss is the same under any learner version.
    stale = translator_loss(translator, [translator_tree([("red square", 0.5), ("navy", 0.0)], version=0)], cfg, 5)
    fresh = translator_loss(translator, [translator_tree([("red square", 0.5), ("navy", 0.0)], version=5)], cfg, 5)
    assert torch.equal(stale.loss, fresh.loss)


def test_dpo_starts_at_log_two_with_zero_margin(tiny_lvlm_path, zoo_dir):
    """Policy = reference at the start: every pair's DPO loss is -log sigmoid(0) = log 2."""
    cfg = TranslatorConfig(model=tiny_lvlm_path, max_new_tokens=8, query_template="{response}")
    translator = QueryTranslator.from_config(cfg, zoo_dir)
    local = translator_loss(translator, [translator_tree([("red circle", 1.0), ("navy", 0.0)])], TrainConfig())
    assert local.loss.item() == pytest.approx(math.log(2.0), abs=1e-5)
    assert local.stats == pytest.approx({"reward_margin": 0.0, "pair_accuracy": 0.0}, abs=1e-5)
