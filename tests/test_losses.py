"""Local losses: preference pairs (of distinct outputs), DPO values, the Plackett-Luce policy loss, its gradient
direction, and truncated importance weights for off-policy examples."""

from __future__ import annotations

import math

import pytest
import torch

from mmrag.rl.losses import (
    dpo_loss,
    gate_loss,
    gate_value_gap,
    pairwise_preference_loss,
    pl_policy_loss,
    preference_stats,
    ranking_draws,
    reference_free_dpo_loss,
    reranker_policy_examples,
    reranker_preference_pairs,
    translator_preference_pairs,
    truncated_importance_weights,
)
from mmrag.rl.plackett_luce import selection_logprob, selection_logprobs
from mmrag.rl.rollout import Node, backprop_values, compute_advantages, shared_reward_credit


def question(query_values: dict[str, float]) -> Node:
    """root -> one translator node per query, each already valued."""
    root = Node("root")
    for query, value in query_values.items():
        root.add(Node("translator", output=query, value=value))
    return root


def outputs(pairs):
    return [(chosen.output, rejected.output) for chosen, rejected in pairs]


def test_translator_pairs_and_margin():
    root = question({"a": 1.0, "b": 0.25, "c": 0.5})
    # Gaps: a-b 0.75, a-c 0.5, c-b 0.25; largest first.
    assert outputs(translator_preference_pairs(root, 0.0, 10)) == [("a", "b"), ("a", "c"), ("c", "b")]
    # Margin 0.3 removes c-b (0.25); margin 0.5 also removes a-c, since the gap must exceed it.
    assert outputs(translator_preference_pairs(root, 0.3, 10)) == [("a", "b"), ("a", "c")]
    assert outputs(translator_preference_pairs(root, 0.5, 10)) == [("a", "b")]


def test_max_pairs_keeps_largest_gaps_with_deterministic_ties():
    root = question({"a": 0.75, "b": 0.25, "c": 0.5, "d": 0.5})
    # Gaps: a-b 0.5, then 0.25 for a-c, a-d, c-b, d-b (ties in sibling order); c-d equal, never a pair.
    assert outputs(translator_preference_pairs(root, 0.0, 10)) == [("a", "b"), ("a", "c"), ("a", "d"),
                                                                   ("c", "b"), ("d", "b")]
    assert outputs(translator_preference_pairs(root, 0.0, 2)) == [("a", "b"), ("a", "c")]
    assert translator_preference_pairs(root, 0.0, 0) == []


def test_identical_queries_pair_once_by_their_mean_value():
    root = question({"x": 1.0})
    root.add(Node("translator", output="x", value=0.0))
    root.add(Node("translator", output="y", value=1.0))
    # x is one query worth (1 + 0) / 2 = 0.5 against y at 1.0; it never pairs with itself.
    assert outputs(translator_preference_pairs(root, 0.0, 4)) == [("y", "x")]
    assert translator_preference_pairs(question({"a": 0.5, "b": 0.5}), 0.0, 4) == []


def test_siblings_drawing_one_query_twice_never_give_contradictory_pairs():
    # A=1.0, A=0.0, B=0.5: A averages 0.5, ties B, so neither A>B nor B>A; both beat C=0.
    root = question({"A": 1.0})
    for query, value in [("A", 0.0), ("B", 0.5), ("C", 0.0)]:
        root.add(Node("translator", output=query, value=value))
    assert outputs(translator_preference_pairs(root, 0.0, 4)) == [("A", "C"), ("B", "C")]
    # The contradictory pairs would also have used up max_pairs: one pair left must be a real one.
    assert outputs(translator_preference_pairs(root, 0.0, 1)) == [("A", "C")]


def test_reranker_pairs_among_one_querys_selections():
    translator = Node("translator")
    for selection, reward in [((0,), 0.0), ((1, 0), 1.0), ((), 0.5)]:
        translator.add(Node("reranker", output=selection, reward=reward))
    backprop_values(translator)
    assert outputs(reranker_preference_pairs(translator, 0.0)) == [((1, 0), (0,)), ((1, 0), ()), ((), (0,))]
    assert outputs(reranker_preference_pairs(translator, 0.6)) == [((1, 0), (0,))]


def test_dpo_loss_value_by_hand():
    policy_chosen, policy_rejected = torch.tensor([-1.0, -2.0], requires_grad=True), torch.tensor([-3.0, -1.0])
    ref_chosen, ref_rejected = torch.tensor([-2.0, -1.0]), torch.tensor([-2.0, -1.0])
    # Pair 1: (-1 - -2) - (-3 - -2) = 2, beta 0.5 -> z = 1, -log sigmoid(1) = log(1 + e^-1) = 0.313262.
    # Pair 2: (-2 - -1) - (-1 - -1) = -1 -> z = -0.5, log(1 + e^0.5) = 0.974077. Mean 0.643670.
    loss = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=0.5)
    expected = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(0.5))) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.643670, abs=1e-6)
    loss.backward()
    # d loss / d pc_i = -beta * (1 - sigmoid(z_i)) / 2 < 0: descending raises the chosen log-prob.
    expected_grad = [-0.5 * (1 - 1 / (1 + math.exp(-z))) / 2 for z in (1.0, -0.5)]
    assert policy_chosen.grad.tolist() == pytest.approx(expected_grad, abs=1e-6)


def test_reference_free_and_pairwise_values_by_hand():
    chosen, rejected = torch.tensor([-1.0]), torch.tensor([-3.0])
    # beta 0.5 * (-1 - -3) = 1 -> log(1 + e^-1) = 0.313262.
    assert reference_free_dpo_loss(chosen, rejected, 0.5).item() == pytest.approx(0.313262, abs=1e-6)
    assert pairwise_preference_loss(chosen, rejected, 0.5).item() == pytest.approx(0.313262, abs=1e-6)
    # Swapped: z = -1 -> log(1 + e) = 1.313262.
    assert pairwise_preference_loss(rejected, chosen, 0.5).item() == pytest.approx(1.313262, abs=1e-6)


def test_empty_batches_give_zero_that_backward_accepts():
    empty_policy = torch.empty(0, requires_grad=True)
    for loss in (dpo_loss(empty_policy, empty_policy, torch.empty(0), torch.empty(0), 0.1),
                 reference_free_dpo_loss(torch.empty(0), torch.empty(0), 0.1),
                 pl_policy_loss(torch.empty(0), torch.empty(0))):
        assert loss.item() == 0.0 and loss.requires_grad
        loss.backward()
    assert empty_policy.grad.shape == (0,)


def test_pl_policy_loss_value_by_hand():
    # -mean(0.5 * -1 + -0.5 * -2) = -mean(-0.5, 1.0) = -0.25.
    loss = pl_policy_loss(torch.tensor([-1.0, -2.0]), torch.tensor([0.5, -0.5]))
    assert loss.item() == pytest.approx(-0.25)


@pytest.mark.parametrize("advantage, direction", [(1.0, 1), (-1.0, -1)])
def test_one_sgd_step_moves_selection_probability_with_advantage(advantage, direction):
    logits = torch.tensor([0.2, -0.1, 0.4, 0.0], requires_grad=True)
    selection = (1, 0)
    before = selection_logprob(logits, selection, 3).item()
    pl_policy_loss(selection_logprob(logits, selection, 3).unsqueeze(0), torch.tensor([advantage])).backward()
    with torch.no_grad():
        logits -= 0.5 * logits.grad  # one plain SGD step, learning rate 0.5
    after = selection_logprob(logits, selection, 3).item()
    assert direction * (after - before) > 0.05


def test_reranker_examples_from_a_scored_tree():
    root = Node("root")
    for rewards in [(1.0, 0.0), (0.5, 0.5)]:
        translator = root.add(Node("translator"))
        for selection, reward in zip([(0, 1), (2,)], rewards):
            translator.add(Node("reranker", output=selection, reward=reward))
    backprop_values(root)
    compute_advantages(root)
    examples = reranker_policy_examples(root)
    # Only the first query's selections differ: advantages +0.5 and -0.5; the tied pair is skipped.
    assert [(node.output, node.advantage) for node in examples] == [((0, 1), 0.5), ((2,), -0.5)]
    logits = torch.tensor([[1.0, 0.0, -1.0, 0.0]] * len(examples), requires_grad=True)
    logprobs = selection_logprobs(logits, [node.output for node in examples], 3)
    loss = pl_policy_loss(logprobs, torch.tensor([node.advantage for node in examples]))
    expected = -(0.5 * logprobs[0].item() - 0.5 * logprobs[1].item()) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def gated_queries(skip_reward: float, draws_per_query: dict[str, list[float]]) -> Node:
    """root -> one query per entry, each with the gate's arms: the empty selection scored `skip_reward` (it reads
    no evidence, so every query of a question scores alike there) and the ranking's draws."""
    root = Node("root", payload={"question": "q"})
    for query, rewards in draws_per_query.items():
        node = root.add(Node("translator", output=query))
        node.add(Node("gate", output="skip")).add(Node("reranker", output=(), reward=skip_reward))
        retrieve = node.add(Node("gate", output="retrieve"))
        for position, reward in enumerate(rewards):
            retrieve.add(Node("reranker", output=(position,), reward=reward))
    return root


def gated_question(skip_reward: float, draw_rewards: list[float]) -> tuple[Node, Node]:
    """root -> one query -> the gate's arms: "skip" above the empty selection, "retrieve" above the draws."""
    root = gated_queries(skip_reward, {"query": draw_rewards})
    return root, root.children[0]


def test_the_gates_arms_split_credit_the_ranking_compares_its_draws_alone():
    root, query = gated_question(0.0, [1.0, 0.5, 0.0])
    backprop_values(root)
    compute_advantages(root)
    # The skip arm's zero on a fact question does not lift every draw's advantage: they compare among themselves.
    assert [(node.output, node.advantage) for node in reranker_policy_examples(root)] == [((0,), 0.5), ((2,), -0.5)]
    assert ranking_draws(query) == query.children[1].children
    assert query.value == pytest.approx(0.25) and gate_value_gap(query) == pytest.approx(-0.5)
    assert outputs(reranker_preference_pairs(query, 0.0)) == [((0,), (2,)), ((0,), (1,)), ((1,), (2,))]
    shared_reward_credit([root])  # the skip arm's leaf is never a ranking example, under shared credit either
    assert () not in {node.output for node in reranker_policy_examples(root)}
    assert gate_value_gap(root.add(Node("translator"))) is None


def test_with_a_gate_shared_reward_changes_only_the_rankings_credit():
    """Shared reward values a query as the mean of its leaves (the skip arm weighs 1/M), tree backprop as the mean
    of its two arms (1/2): the values differ, but the skip arm scores alike for every query of a question, so both
    are one increasing function of the retrieve arm's value, and the translator's pairs and the gate's gaps are the
    same. What differs is the ranking: tree backprop gives draws that tie with their siblings no signal, shared
    reward gives them the query's offset from the batch."""
    draws = {"a": [1.0, 0.0, 0.0], "b": [1.0, 1.0, 0.0], "c": [1.0, 1.0, 1.0]}
    tree, shared = gated_queries(0.0, draws), gated_queries(0.0, draws)
    backprop_values(tree)
    compute_advantages(tree)
    shared_reward_credit([shared])
    assert [q.value for q in tree.children] == pytest.approx([1 / 6, 1 / 3, 1 / 2])
    assert [q.value for q in shared.children] == pytest.approx([1 / 4, 1 / 2, 3 / 4])
    assert (set(outputs(translator_preference_pairs(tree, 0.0, 10)))
            == set(outputs(translator_preference_pairs(shared, 0.0, 10))) == {("c", "a"), ("c", "b"), ("b", "a")})
    assert [gate_value_gap(q) for q in tree.children] == [gate_value_gap(q) for q in shared.children]
    tied = ranking_draws(tree.children[2]), ranking_draws(shared.children[2])  # query c: every draw answers
    assert [node.advantage for node in tied[0]] == [0.0] * 3
    assert [node.advantage for node in tied[1]] == [0.5] * 3  # 1 - the batch's mean leaf, 6 / 12
    assert len(reranker_policy_examples(tree)) == 6 and len(reranker_policy_examples(shared)) == 9


def test_the_gate_loss_fits_the_better_arm_weighted_by_its_worth_and_stays_bounded():
    logits = torch.tensor([0.0, 0.0, 3.0, -30.0], requires_grad=True)
    gaps = torch.tensor([0.5, -0.25, 0.0, -1.0])
    loss = gate_loss(logits, gaps)
    expected = (0.5 * math.log(2) + 0.25 * math.log(2) + 0.0 + 1.0 * math.log1p(math.exp(-30.0))) / 4
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    loss.backward()
    # Towards skipping where skipping won, towards retrieving where retrieving won; a tie and a query already
    # decided (skip logit -30 where retrieval won) pull nothing.
    assert logits.grad[0] < 0 < logits.grad[1]
    assert logits.grad[2].item() == 0.0 and abs(logits.grad[3].item()) < 1e-12
    empty = torch.zeros(0, requires_grad=True)
    gate_loss(empty, torch.zeros(0)).backward()
    with pytest.raises(ValueError, match="one entry per pair"):
        gate_loss(torch.zeros(2), torch.zeros(3))


def test_a_gap_unit_counts_every_gap_of_at_least_that_much_alike():
    logits = torch.zeros(4)
    gaps = torch.tensor([0.04, -1.0, 0.01, 0.0])  # skipping saves two documents' price; retrieving answers; ...
    per_query = math.log(2) * torch.tensor([1.0, 1.0, 0.5, 0.0])  # ... half a unit counts half; a tie nothing
    assert gate_loss(logits, gaps, gap_unit=0.02).item() == pytest.approx(per_query.mean().item(), rel=1e-6)
    assert gate_loss(logits, gaps).item() == pytest.approx(  # the regret: two documents weigh 25 times less
        math.log(2) * (0.04 + 1.0 + 0.01) / 4, rel=1e-6)
    assert gate_loss(torch.zeros(1), torch.tensor([1.1]), gap_unit=1.0).item() == pytest.approx(math.log(2), rel=1e-6)
    with pytest.raises(ValueError, match="gap_unit must be positive"):
        gate_loss(logits, gaps, gap_unit=0.0)


def test_gate_values_must_be_filled_first():
    root, query = gated_question(1.0, [0.0])
    with pytest.raises(ValueError, match="run backprop_values first"):
        gate_value_gap(query)


def test_no_signal_batch_gives_no_examples_and_zero_loss():
    root = Node("root")
    translator = root.add(Node("translator"))
    for selection in [(0,), (1,), ()]:
        translator.add(Node("reranker", output=selection, reward=0.5))
    backprop_values(root)
    compute_advantages(root)
    assert reranker_policy_examples(root) == []
    assert reranker_preference_pairs(translator, 0.0) == []
    logits = torch.zeros((0, 4), requires_grad=True)
    loss = pl_policy_loss(selection_logprobs(logits, [], 3), torch.empty(0))
    loss.backward()
    assert loss.item() == 0.0 and not torch.isnan(logits.grad).any()


def test_bad_settings_name_the_config_field():
    with pytest.raises(ValueError, match="train.dpo_beta"):
        reference_free_dpo_loss(torch.tensor([0.0]), torch.tensor([0.0]), 0.0)
    with pytest.raises(ValueError, match="train.pair_margin"):
        translator_preference_pairs(question({"a": 1.0}), -0.1, 4)
    with pytest.raises(ValueError, match="one entry per pair"):
        pl_policy_loss(torch.zeros(2), torch.zeros(3))


@pytest.mark.parametrize("reranker_loss, reranker_examples", [("pl_policy", 2), ("pairwise", 1)])
def test_example_count_is_what_each_loss_averages_over(reranker_loss, reranker_examples):
    from mmrag.config import TrainConfig
    from mmrag.training.updates import example_count

    root = Node("root", payload={"question": "q"})
    for rewards in [(1.0, 0.0), (1.0, 1.0)]:
        translator = root.add(Node("translator", output=f"query {rewards}"))
        for selection, reward in zip([(0, 1), (2,)], rewards):
            translator.add(Node("reranker", output=selection, reward=reward))
    backprop_values(root)
    compute_advantages(root)
    cfg = TrainConfig(reranker_loss=reranker_loss)
    # Query values 0.5 and 1.0 make one translator pair; only the first query's two selections differ.
    assert example_count("translator", [root], cfg) == 1
    assert example_count("reranker", [root], cfg) == reranker_examples
    assert example_count("reranker", [root, root], cfg) == 2 * reranker_examples
    with pytest.raises(ValueError, match="'generator'"):
        example_count("generator", [root], cfg)


def test_importance_weights_are_exactly_one_on_policy_and_truncated_at_the_cap():
    weights, ratios = truncated_importance_weights(torch.zeros(3), cap=2.0)
    assert torch.equal(weights, torch.ones(3)) and torch.equal(ratios, torch.ones(3))
    weights, ratios = truncated_importance_weights(torch.tensor([math.log(3.0), math.log(0.5)]), cap=2.0)
    assert weights.tolist() == pytest.approx([2.0, 0.5]) and ratios.tolist() == pytest.approx([3.0, 0.5])
    with pytest.raises(ValueError, match="train.importance_ratio_cap"):
        truncated_importance_weights(torch.zeros(1), cap=0.5)


def test_on_policy_weights_leave_the_policy_loss_and_its_gradient_unchanged():
    logits = torch.tensor([[0.3, -0.2, 0.1], [1.0, 0.5, -1.0]], requires_grad=True)
    logprobs = selection_logprobs(logits, [(0,), (1, 0)], 2)
    advantages = torch.tensor([0.5, -0.5])
    # log pi_now - log pi_behaviour on-policy: the recomputed log-prob against itself.
    weights, _ = truncated_importance_weights(logprobs - logprobs.detach(), cap=2.0)
    plain = torch.autograd.grad(pl_policy_loss(logprobs, advantages), logits, retain_graph=True)[0]
    weighted_loss = pl_policy_loss(logprobs, advantages, weights)
    assert torch.equal(weighted_loss, pl_policy_loss(logprobs, advantages))
    assert torch.equal(torch.autograd.grad(weighted_loss, logits)[0], plain)


def test_stale_selection_gradient_is_scaled_by_its_truncated_ratio():
    # Three items, all logits 0 (candidates 0, 1 and STOP), max_docs 1: P((0,)) = 1/3 and
    # d log P((0,)) / d logits = onehot(0) - softmax = [2/3, -1/3, -1/3].
    logits = torch.zeros(3, requires_grad=True)
    logprob = selection_logprob(logits, (0,), 1).unsqueeze(0)
    advantage = torch.tensor([0.5])
    # Drawn by an older policy under which P((0,)) was 1/6: ratio (1/3) / (1/6) = 2.
    log_ratio = logprob.detach() - math.log(1 / 6)
    for cap, weight in [(4.0, 2.0), (1.5, 1.5)]:
        weights, ratios = truncated_importance_weights(log_ratio, cap)
        assert ratios.item() == pytest.approx(2.0) and weights.item() == pytest.approx(weight)
        (grad,) = torch.autograd.grad(pl_policy_loss(logprob, advantage, weights), logits, retain_graph=True)
        # -w * A * [2/3, -1/3, -1/3]: the uncorrected -A * [...] scaled by w.
        assert grad.tolist() == pytest.approx([-weight * 0.5 * 2 / 3, weight * 0.5 / 3, weight * 0.5 / 3], abs=1e-6)


def test_weighted_pairwise_loss_and_preference_stats_by_hand():
    chosen, rejected = torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0])
    # beta 0.5: z = 1 and -0.5 -> losses log(1 + e^-1) = 0.313262 and log(1 + e^0.5) = 0.974077.
    loss = pairwise_preference_loss(chosen, rejected, 0.5, weights=torch.tensor([2.0, 0.5]))
    assert loss.item() == pytest.approx((2.0 * 0.313262 + 0.5 * 0.974077) / 2, abs=1e-6)
    # Margins beta * (c - r) = 1 and -0.5: mean 0.25, one pair in two ranked right.
    assert preference_stats(chosen, rejected, 0.5) == pytest.approx({"reward_margin": 0.25, "pair_accuracy": 0.5})
