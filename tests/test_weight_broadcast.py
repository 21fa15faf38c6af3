"""The bucketed full-weight broadcast: buckets cut by size and dtype; replicas receive bit-identical weights."""

from __future__ import annotations

import logging
import threading

import pytest
import torch

from mmrag.training.metrics_log import step_records
from mmrag.training.weight_broadcast import buckets, join_sync_group, receive_state, send_state, serve_sync_store


def test_buckets_are_cut_by_size_and_at_every_change_of_dtype():
    state = {"a": torch.zeros(4), "b": torch.zeros(4), "c": torch.zeros(2, dtype=torch.bfloat16),
             "d": torch.zeros(16), "e": torch.zeros(1)}
    # 16-byte floats a, b fit 32 bytes together; c changes dtype; d (64 bytes) travels alone, e after it.
    assert buckets(state, bucket_bytes=32) == [["a", "b"], ["c"], ["d"], ["e"]]


def test_two_replicas_install_bit_identical_weights_through_the_broadcast():
    torch.manual_seed(0)
    sent = {"embed": torch.randn(50, 8).to(torch.bfloat16), "layer.weight": torch.randn(8, 8),
            "layer.bias": torch.randn(8), "head": torch.randn(8, 3).to(torch.bfloat16)}
    templates = [{key: torch.zeros_like(value) for key, value in sent.items()} for _ in range(2)]
    store = serve_sync_store(world=3)
    received: dict[int, dict] = {}
    errors: list[BaseException] = []

    def replica(rank: int) -> None:
        try:
            group = join_sync_group(None, "127.0.0.1", store.port, rank, 3, timeout_s=30)
            received[rank] = receive_state(group, templates[rank - 1], bucket_bytes=256)
        except BaseException as exc:  # surfaced below: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=replica, args=(rank,)) for rank in (1, 2)]
    for thread in threads:
        thread.start()
    send_state(join_sync_group(store, "", 0, 0, 3, timeout_s=30), sent, bucket_bytes=256)
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors
    for rank in (1, 2):
        assert list(received[rank]) == list(sent)
        for key, value in sent.items():
            assert received[rank][key].dtype == value.dtype and torch.equal(received[rank][key], value), key


@pytest.mark.slow
def test_a_distributed_run_syncing_by_broadcast_samples_what_the_object_store_run_samples(
        distributed_sync_run, tiny_config, tmp_path, caplog):
    """Same seeds, same versions: every replica must have installed each version bit-identically to draw the
    uninterrupted run's rewards; no broadcast may have fallen back to the object store."""
    from mmrag.pipelines.train import train_distributed

    with caplog.at_level(logging.WARNING, logger="mmrag.actors.weight_sync"):
        train_distributed(tiny_config(tmp_path, "train.steps=2", "learner.weight_sync=broadcast",
                                      "learner.durable_weights=false"), progress=False)
    assert not [r for r in caplog.records if r.name == "mmrag.actors.weight_sync"], caplog.text
    broadcast, object_store = ([r["reward_mean"] for r in step_records(d)]
                               for d in (tmp_path, distributed_sync_run))
    assert broadcast == object_store[:2] and len(broadcast) == 2
