"""Plackett-Luce over candidates + STOP: normalisation, hand-worked log-probs, sampling, greedy."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from mmrag.rl.plackett_luce import (
    enumerate_selections,
    greedy_selection,
    sample_selections,
    selection_logprob,
    selection_logprobs,
)

# Weights 2, 1, 1 for candidates 0..2 and 1 for STOP (last), as logits = log(weights).
WEIGHTS = torch.tensor([2.0, 1.0, 1.0, 1.0])
LOGITS = WEIGHTS.log()


def total_probability(logits, max_docs, mask=None, k=3):
    selections = [s for s in enumerate_selections(k, max_docs) if mask is None or all(mask[i] for i in s)]
    return float(sum(selection_logprob(logits, s, max_docs, mask).exp() for s in selections))


def test_enumerate_counts():
    # max_docs 2 over 3: 1 empty + 3 singles + 3*2 ordered pairs = 10; max_docs 3 adds 3! = 6.
    assert len(enumerate_selections(3, 2)) == 10
    assert len(enumerate_selections(3, 3)) == 16
    assert enumerate_selections(3, 0) == [()]


@pytest.mark.parametrize("max_docs", [0, 1, 2, 3, 5])
def test_probabilities_sum_to_one(max_docs):
    logits = torch.tensor([0.3, -1.2, 0.8, 0.1])
    assert total_probability(logits, max_docs) == pytest.approx(1.0, abs=1e-6)


def test_probabilities_sum_to_one_with_padding_mask():
    logits = torch.tensor([0.3, 5.0, 0.8, 0.1])
    mask = torch.tensor([True, False, True])
    assert total_probability(logits, 3, mask) == pytest.approx(1.0, abs=1e-6)
    assert total_probability(logits, 1, mask) == pytest.approx(1.0, abs=1e-6)


def test_hand_computed_logprobs():
    # (0, 2) with max_docs 3: 2/(2+1+1+1) * 1/(1+1+1) * STOP 1/(1+1) = 2/5 * 1/3 * 1/2 = 1/15.
    assert float(selection_logprob(LOGITS, (0, 2), 3)) == pytest.approx(math.log(1 / 15), abs=1e-6)
    # With max_docs 2 STOP is implied after two candidates: 2/5 * 1/3 = 2/15.
    assert float(selection_logprob(LOGITS, (0, 2), 2)) == pytest.approx(math.log(2 / 15), abs=1e-6)
    # Empty selection: STOP first, 1/5.
    assert float(selection_logprob(LOGITS, (), 3)) == pytest.approx(math.log(1 / 5), abs=1e-6)
    # Masking candidate 1 out: (0,) = 2/(2+1+1) * STOP 1/(1+1) = 1/4.
    mask = torch.tensor([True, False, True])
    assert float(selection_logprob(LOGITS, (0,), 3, mask)) == pytest.approx(math.log(1 / 4), abs=1e-6)


def test_batched_matches_single_and_gradient():
    logits = torch.stack([LOGITS, torch.tensor([0.5, -0.5, 0.0, 1.0])]).requires_grad_()
    batch = selection_logprobs(logits, [(), (2, 1)], 3)
    assert batch[0].item() == pytest.approx(math.log(1 / 5), abs=1e-6)
    assert batch[1].item() == pytest.approx(float(selection_logprob(logits[1].detach(), (2, 1), 3)), abs=1e-6)
    batch[0].backward()
    # d log P(STOP first) / d l_STOP = 1 - p_STOP = 1 - 1/5; d / d l_0 = -p_0 = -2/5; row 1 untouched.
    assert float(logits.grad[0, 3]) == pytest.approx(0.8, abs=1e-6)
    assert float(logits.grad[0, 0]) == pytest.approx(-0.4, abs=1e-6)
    assert torch.count_nonzero(logits.grad[1]) == 0


@pytest.mark.parametrize("bad, message", [((0, 0), "repeats"), ((3,), "not a valid candidate"),
                                          ((0, 1, 2), "longer than max_docs")])
def test_invalid_selections_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        selection_logprob(LOGITS, bad, 2)


def test_masked_candidate_cannot_be_selected():
    with pytest.raises(ValueError, match="not a valid candidate"):
        selection_logprob(LOGITS, (1,), 3, torch.tensor([True, False, True]))


@pytest.mark.parametrize("temperature, mask", [(1.0, None), (2.0, None), (0.5, torch.tensor([True, True, False]))])
def test_sample_frequencies_match_probabilities(temperature, mask):
    logits = torch.tensor([1.0, 0.2, -0.4, 0.3])
    draws = 20000
    samples = sample_selections(logits, draws, 2, temperature, torch.Generator().manual_seed(0), mask)
    counts = Counter(samples)
    for selection in enumerate_selections(3, 2):
        if mask is not None and not all(mask[i] for i in selection):
            assert counts[selection] == 0
            continue
        expected = float(selection_logprob(logits / temperature, selection, 2, mask).exp())
        # Binomial standard error <= sqrt(0.25 / 20000) = 0.0035; 0.015 is over 4 of them.
        assert counts[selection] / draws == pytest.approx(expected, abs=0.015)


def test_sampling_is_reproducible_and_respects_max_docs():
    generator_a, generator_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    logits = torch.tensor([3.0, 3.0, 3.0, -5.0])
    first = sample_selections(logits, 50, 2, generator=generator_a)
    assert first == sample_selections(logits, 50, 2, generator=generator_b)
    assert max(len(s) for s in first) == 2


def test_greedy_cuts_at_stop():
    # Order by logit: 1 (3.0), 0 (1.0), 2 (-1.0); STOP is 0.5, so candidate 2 is cut.
    logits = torch.tensor([1.0, 3.0, -1.0, 0.5])
    assert greedy_selection(logits, 3) == (1, 0)
    assert greedy_selection(logits, 1) == (1,)
    assert greedy_selection(logits, 3, torch.tensor([True, False, True])) == (0,)
    assert greedy_selection(torch.tensor([1.0, 3.0, -1.0, 4.0]), 3) == ()
    # A candidate tied with STOP is not kept.
    assert greedy_selection(torch.tensor([0.5, 2.0, 0.0, 0.5]), 3) == (1,)
