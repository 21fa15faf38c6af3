"""Plackett-Luce over K retrieved candidates plus a learned STOP item.

The adaptive reranker scores K candidates and one STOP item (logits[..., K], the last
entry). A selection is an ordered tuple of distinct candidate indices: items are drawn
without replacement, each with probability softmax over what is still available
(unchosen valid candidates and STOP); drawing STOP ends the selection, and after
`max_docs` candidates STOP is implied (probability 1, no factor). So

    log P(s_1..s_L) = sum_t [l_{s_t} - logsumexp(available_t)]
                      + [L < max_docs] * (l_STOP - logsumexp(available_{L+1}))

The reranker samples selections here during rollouts and the learner differentiates
`selection_logprobs` in the reranker's policy loss. Sampling at temperature T draws from
the policy with logits / T; a sample's log-prob under that policy is
`selection_logprob(logits / T, ...)`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch

Selection = tuple[int, ...]


def _num_candidates(logits: torch.Tensor, mask: torch.Tensor | None) -> int:
    """K, after checking that logits end in K + 1 entries and the mask in K."""
    if logits.dim() == 0 or logits.shape[-1] < 1:
        raise ValueError(f"logits: expected shape [..., K + 1] with STOP last, got {tuple(logits.shape)}")
    k = logits.shape[-1] - 1
    if mask is not None and (mask.shape[-1] != k or mask.shape[:-1] != logits.shape[:-1]):
        raise ValueError(f"mask: expected shape {tuple(logits.shape[:-1]) + (k,)} for logits {tuple(logits.shape)}, "
                         f"got {tuple(mask.shape)}")
    return k


def _check_max_docs(max_docs: int) -> None:
    if not isinstance(max_docs, int) or max_docs < 0:
        raise ValueError(f"max_docs: expected an int >= 0, got {max_docs!r}")


def _available_with_stop(logits: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Bool [..., K + 1]: valid candidates, and STOP which is always available."""
    available = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    if mask is not None:
        available[..., :-1] = mask.to(torch.bool)
    return available


def _check_selection(selection: Sequence[int], row: int, available: torch.Tensor, max_docs: int) -> None:
    k = available.shape[-1] - 1
    if len(selection) > max_docs:
        raise ValueError(f"selections[{row}] = {tuple(selection)}: longer than max_docs = {max_docs}")
    if len(set(selection)) != len(selection):
        raise ValueError(f"selections[{row}] = {tuple(selection)}: repeats a candidate (draws are without replacement)")
    for index in selection:
        if not 0 <= index < k or not bool(available[index]):
            raise ValueError(f"selections[{row}] = {tuple(selection)}: {index} is not a valid candidate "
                             f"(valid: unmasked indices in 0..{k - 1})")


def selection_logprobs(logits: torch.Tensor, selections: Sequence[Sequence[int]], max_docs: int,
                       mask: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable log-probability of each row's selection: logits [B, K+1] -> [B]."""
    _check_max_docs(max_docs)
    if logits.dim() != 2 or len(selections) != logits.shape[0]:
        raise ValueError(f"selection_logprobs: expected logits [B, K + 1] and B selections, got logits "
                         f"{tuple(logits.shape)} and {len(selections)} selections")
    k = _num_candidates(logits, mask)
    available = _available_with_stop(logits, mask)
    for row, selection in enumerate(selections):
        _check_selection(selection, row, available[row], max_docs)
    rows = torch.arange(logits.shape[0], device=logits.device)
    total = logits[:, -1] * 0.0  # zeros that keep a grad path, even for an empty batch
    # Step t draws selection[t], or STOP at t == len(selection) unless max_docs was reached.
    for step in range(max_docs + 1):
        drawn = [s[step] if step < len(s) else k for s in selections]
        active = torch.tensor([step < len(s) or (step == len(s) < max_docs) for s in selections],
                              device=logits.device)
        if not bool(active.any()):
            break
        drawn_index = torch.tensor(drawn, device=logits.device)
        normaliser = torch.logsumexp(logits.masked_fill(~available, float("-inf")), dim=-1)
        term = logits[rows, drawn_index] - normaliser
        total = total + torch.where(active, term, torch.zeros_like(term))
        available = available.clone()
        available[rows, drawn_index] = drawn_index == k  # chosen candidates leave; STOP stays
    return total


def selection_logprob(logits: torch.Tensor, selection: Sequence[int], max_docs: int,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable scalar log-probability of one selection under logits [K + 1]."""
    if logits.dim() != 1:
        raise ValueError(f"selection_logprob: expected logits [K + 1], got {tuple(logits.shape)}; "
                         "use selection_logprobs for a batch")
    batch_mask = None if mask is None else mask.unsqueeze(0)
    return selection_logprobs(logits.unsqueeze(0), [selection], max_docs, batch_mask)[0]


def _truncate_at_stop(order: list[int], stop: int, max_docs: int) -> Selection:
    """A full ranking of candidates + STOP, cut at STOP or after max_docs candidates."""
    cut = order.index(stop)
    return tuple(order[:min(cut, max_docs)])


def sample_selections(logits: torch.Tensor, m: int, max_docs: int, temperature: float = 1.0,
                      generator: torch.Generator | None = None,
                      mask: torch.Tensor | None = None) -> list[Selection]:
    """m independent selections from logits [K + 1] at `temperature`.

    Gumbel-top-k: sorting (logits / T + Gumbel noise) over candidates and STOP gives a
    Plackett-Luce ranking; cutting it at STOP is the same as drawing one by one until STOP.
    """
    _check_max_docs(max_docs)
    if logits.dim() != 1:
        raise ValueError(f"sample_selections: expected logits [K + 1], got {tuple(logits.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature: expected > 0, got {temperature!r}")
    if m < 0:
        raise ValueError(f"m: expected a number of samples >= 0, got {m!r}")
    k = _num_candidates(logits, mask)
    with torch.no_grad():
        scaled = (logits.detach().float() / temperature).cpu()
        available = _available_with_stop(scaled, None if mask is None else mask.cpu())
        uniform = torch.rand((m, k + 1), generator=generator).clamp_(1e-12, 1.0 - 1e-7)
        perturbed = (scaled - torch.log(-torch.log(uniform))).masked_fill(~available, float("-inf"))
        orders = torch.argsort(perturbed, dim=-1, descending=True).tolist()
    return [_truncate_at_stop(order, k, max_docs) for order in orders]


def greedy_selection(logits: torch.Tensor, max_docs: int, mask: torch.Tensor | None = None) -> Selection:
    """Inference selection: valid candidates by descending logit, kept while each beats STOP.

    A candidate whose logit equals STOP's is not kept; equal candidates keep index order.
    """
    _check_max_docs(max_docs)
    if logits.dim() != 1:
        raise ValueError(f"greedy_selection: expected logits [K + 1], got {tuple(logits.shape)}")
    k = _num_candidates(logits, mask)
    scores = logits.detach()
    order = torch.sort(scores[:k], descending=True, stable=True).indices.tolist()
    valid = order if mask is None else [i for i in order if bool(mask[i])]
    stop_logit = float(scores[k])
    kept = list(itertools.takewhile(lambda i: float(scores[i]) > stop_logit, valid))
    return tuple(kept[:max_docs])


def enumerate_selections(k: int, max_docs: int) -> list[Selection]:
    """Every selection of at most max_docs distinct candidates out of k, shortest first."""
    _check_max_docs(max_docs)
    return [s for length in range(min(k, max_docs) + 1) for s in itertools.permutations(range(k), length)]
