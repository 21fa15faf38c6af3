"""The weight-sync check: a policy replica compares the weights it installed with the learner's per-tensor digest
of them; past the tolerance it reinstalls from the run's storage, and if they still differ its call fails naming
the version and the tensor (`mmrag.actors.policy.check_installed`).

A real tiny translator installs a version whose broadcast (the transit) corrupted one element of one tensor.
"""

from __future__ import annotations

import logging
import time

import pytest
import torch

from mmrag.actors.policy import InstalledVersion, PolicyWeights, WeightSyncMismatch
from mmrag.models.translator import QueryTranslator
from mmrag.training.published_weights import component_file, state_digest, write_published


@pytest.fixture(scope="module")
def translator(tiny_config, tmp_path_factory) -> QueryTranslator:
    cfg = tiny_config(tmp_path_factory.mktemp("unused"))
    return QueryTranslator.from_config(cfg.translator, cfg.zoo.cache_dir, "cpu")


def _published(translator: QueryTranslator) -> dict[str, torch.Tensor]:
    """A version the learner published: the replica's weights moved off, so that installing it changes them."""
    return {name: tensor + 0.01 for name, tensor in translator.trainable_state_dict().items()}


def _corrupted(state: dict[str, torch.Tensor]) -> tuple[str, dict[str, torch.Tensor]]:
    name = sorted(state)[len(state) // 2]
    corrupted = {key: tensor.clone() for key, tensor in state.items()}
    corrupted[name].view(-1)[0] += 0.5
    return name, corrupted


def _install(translator, published, received, durable) -> int:
    installed = InstalledVersion()
    installed.received = ("publication-3", received)  # what the broadcast delivered
    weights = PolicyWeights(3, (), generation=1, publish_id="publication-3", durable=durable,
                            digest=state_digest(published), tolerance=1e-6)
    return installed.ensure(weights, translator.load_trainable_state_dict, translator.trainable_state_dict)


def _assert_holds(translator, state) -> None:
    held = translator.trainable_state_dict()
    assert all(torch.equal(held[name], state[name]) for name in state)


def test_a_tensor_corrupted_in_transit_is_caught_and_reinstalled_from_the_runs_storage(translator, tmp_path, caplog):
    published = _published(translator)
    tensor, corrupted = _corrupted(published)
    uri = write_published(tmp_path, 3, {"translator": published}, keep=2)
    assert _install(translator, published, corrupted, component_file(uri, "translator")) == 3
    _assert_holds(translator, published)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith(f"policy weights 1.3: installed tensor {tensor} differs from the learner's by "), line
    assert "reinstalling from" in line


def test_weights_that_still_differ_after_the_reinstall_fail_the_call_naming_the_version_and_the_tensor(
        translator, tmp_path):
    published = _published(translator)
    tensor, corrupted = _corrupted(published)
    uri = write_published(tmp_path, 3, {"translator": corrupted}, keep=2)  # the stored copy is bad too
    with pytest.raises(WeightSyncMismatch, match=rf"^policy weights 1\.3: tensor {tensor} differs from the learner's "
                                                 r"by .* after reinstalling from the run's storage"):
        _install(translator, published, corrupted, component_file(uri, "translator"))


def test_a_clean_install_passes_and_the_check_costs_little(translator, tmp_path, capsys):
    published = _published(translator)
    _install(translator, published, published, None)
    _assert_holds(translator, published)
    start = time.perf_counter()
    for _ in range(5):
        state_digest(translator.trainable_state_dict())
    seconds = (time.perf_counter() - start) / 5
    size = sum(t.numel() for t in published.values())
    with capsys.disabled():
        print(f"\nweight-sync check: {seconds * 1e3:.1f} ms per digest of the tiny translator's {size:,} trainable "
              "values (one on the learner, one on each replica, per checked version)")
    assert seconds < 1.0
