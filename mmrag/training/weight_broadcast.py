"""Full-weight sync by a bucketed broadcast: the learner's rank 0 sends a state dict to every policy replica of one
component over a process group of their own (gloo on CPUs, NCCL on GPUs), bucket by bucket.

With LoRA off a version is the whole translator (about 1 GB at 0.5 B parameters in bf16): through the object
store each replica fetches and copies its own; a broadcast sends each bucket once to all of them and no
replica waits for the whole dict before it can copy (`benchmarks/weight_sync.py` measures both). The sync
group is separate from the learner's own process group (a `ProcessGroupGloo` / `ProcessGroupNCCL` built on a
store of its own), so replicas join and leave it without touching the ranks' training collectives. Every
member calls `send_state` (rank 0) or `receive_state` (the others) with the same tensors' shapes in the same
key order: a replica passes its own state dict as the template.
"""

from __future__ import annotations

import datetime

import torch

Bucket = list[str]
"""Consecutive keys of a state dict whose tensors share a dtype and fit one bucket."""


def serve_sync_store(world: int) -> torch.distributed.TCPStore:
    """Rank 0's store for a sync group of `world` members, on a port the OS picks (`.port`) and holds."""
    return torch.distributed.TCPStore("0.0.0.0", 0, world, is_master=True, wait_for_workers=False)


def join_sync_group(store: torch.distributed.Store | None, address: str, port: int, rank: int, world: int,
                    timeout_s: float, use_gpu: bool = False) -> torch.distributed.ProcessGroup:
    """Join the sync group at address:port (`store`: rank 0's own, from `serve_sync_store`); its collectives fail
    after `timeout_s`, so a member lost mid-broadcast fails the others instead of hanging them."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = store or torch.distributed.TCPStore(address, port, world, is_master=False, timeout=timeout)
    if use_gpu:
        options = torch.distributed.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return torch.distributed.ProcessGroupNCCL(store, rank, world, options)
    return torch.distributed.ProcessGroupGloo(store, rank, world, timeout)


def buckets(state: dict[str, torch.Tensor], bucket_bytes: int) -> list[Bucket]:
    """The keys of `state` in order, cut into buckets of at most `bucket_bytes` (a larger tensor alone) and at every
    change of dtype (a bucket travels as one flat tensor)."""
    groups, current, size, dtype = [], [], 0, None
    for key, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if current and (size + nbytes > bucket_bytes or tensor.dtype != dtype):
            groups.append(current)
            current, size = [], 0
        current.append(key)
        size += nbytes
        dtype = tensor.dtype
    return groups + ([current] if current else [])


def send_state(group: torch.distributed.ProcessGroup, state: dict[str, torch.Tensor], bucket_bytes: int,
               device: str = "cpu") -> None:
    """Rank 0: broadcast `state` bucket by bucket, each bucket sent from `device` (a GPU for NCCL)."""
    for keys in buckets(state, bucket_bytes):
        flat = torch.cat([state[key].detach().reshape(-1) for key in keys]).to(device)
        group.broadcast([flat]).wait()


def receive_state(group: torch.distributed.ProcessGroup, like: dict[str, torch.Tensor], bucket_bytes: int,
                  device: str = "cpu") -> dict[str, torch.Tensor]:
    """A replica: the state rank 0 sends, shaped as `like` (this replica's own state dict of the component), each
    bucket received on `device` (a GPU for NCCL) and returned on `like`'s devices."""
    received = {}
    for keys in buckets(like, bucket_bytes):
        flat = torch.empty(sum(like[key].numel() for key in keys), dtype=like[keys[0]].dtype, device=device)
        group.broadcast([flat]).wait()
        offset = 0
        for key in keys:
            count = like[key].numel()
            received[key] = flat[offset:offset + count].view_as(like[key]).to(like[key].device)
            offset += count
    return received
