"""Full-weight sync: seconds per published version, through the object store (today's path) and through a
bucketed broadcast over a torch process group (gloo here, NCCL on GPUs), with LoRA off.

A learner actor holds a translator-sized causal LM (Qwen2-0.5B's shape, randomly initialised: nothing is
downloaded) and `--replicas` replica actors hold the same architecture. One version is synced when every
replica has installed it (copied into its own parameters) and could sample:

* object store: the learner returns its state dict from a call (one copy into the store, as rank 0's `update`
  does), each replica is handed the nested reference, fetches it and `load_state_dict`s it;
* broadcast: the learner and the replicas are one gloo group; the learner packs the parameters into buckets of
  `--bucket-mb` and broadcasts them one by one, each replica copying each bucket into its parameters.

The machine's memory-copy bandwidth (one large tensor copy) is measured in the same run, as the yardstick
both paths are bounded by on one host. Results: benchmarks/results/weight_sync.json, a section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import ray
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from benchmarks.results import machine, markdown_table, publish_figures

RESULTS_JSON = Path(__file__).with_name("results") / "weight_sync.json"
QWEN2_05B_SHAPE = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                   "tie_word_embeddings": True}
"""Qwen2-0.5B-Instruct's architecture: ~494 M parameters."""


def build_model(dtype: str) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.device("cpu"):
        return Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B_SHAPE)).to(getattr(torch, dtype))


def buckets(params: list[torch.Tensor], bucket_bytes: int) -> list[list[torch.Tensor]]:
    """Consecutive parameters grouped so each group's bytes stay under `bucket_bytes` (a larger tensor alone)."""
    groups, current, size = [], [], 0
    for param in params:
        nbytes = param.numel() * param.element_size()
        if current and size + nbytes > bucket_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(param)
        size += nbytes
    return groups + ([current] if current else [])


@ray.remote(num_cpus=0)
class WeightHolder:
    """The learner (rank 0 of the sync group) or a policy replica: a model and its place in the gloo group."""

    def __init__(self, dtype: str, bucket_mb: int):
        torch.set_num_threads(1)
        self.model = build_model(dtype)
        self.params = [p.data for p in self.model.parameters()]
        self.bucket_bytes = bucket_mb << 20

    def parameter_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)

    def rendezvous(self, world: int) -> tuple[str, int]:
        self.store = torch.distributed.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
        return "127.0.0.1", self.store.port

    def join(self, rank: int, world: int, address: str, port: int) -> None:
        store = getattr(self, "store", None) or torch.distributed.TCPStore(address, port, world, is_master=False)
        torch.distributed.init_process_group("gloo", store=store, rank=rank, world_size=world)
        self.rank = rank

    def state_dict(self) -> dict:
        """Today's path on the learner: the whole state dict, returned into the object store."""
        return self.model.state_dict()

    def install_from_store(self, nested: list) -> int:
        self.model.load_state_dict(ray.get(nested[0]))
        return 1

    def broadcast(self) -> int:
        """Every member calls it: rank 0 sends bucket by bucket, the others copy each bucket into their params."""
        for group in buckets(self.params, self.bucket_bytes):
            flat = (torch.cat([p.reshape(-1) for p in group]) if self.rank == 0
                    else torch.empty(sum(p.numel() for p in group), dtype=group[0].dtype))
            torch.distributed.broadcast(flat, src=0)
            if self.rank != 0:
                offset = 0
                for p in group:
                    p.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        return 1


def memcpy_gb_per_s(nbytes: int) -> float:
    source = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    target = torch.empty_like(source)
    target.copy_(source)  # touch the pages
    times = []
    for _ in range(3):
        start = time.perf_counter()
        target.copy_(source)
        times.append(time.perf_counter() - start)
    return nbytes / min(times) / 1e9


def measure(replica_count: int, versions: int, dtype: str, bucket_mb: int) -> dict:
    learner = WeightHolder.remote(dtype, bucket_mb)
    replicas = [WeightHolder.remote(dtype, bucket_mb) for _ in range(replica_count)]
    nbytes = ray.get(learner.parameter_bytes.remote())
    ray.get([r.__ray_ready__.remote() for r in replicas])
    world = replica_count + 1
    address, port = ray.get(learner.rendezvous.remote(world))
    ray.get([member.join.remote(rank, world, address, port) for rank, member in enumerate([learner, *replicas])])

    def object_store_version() -> float:
        start = time.perf_counter()
        ref = learner.state_dict.remote()
        ray.get([r.install_from_store.remote([ref]) for r in replicas])
        seconds = time.perf_counter() - start
        del ref
        return seconds

    def broadcast_version() -> float:
        start = time.perf_counter()
        ray.get([member.broadcast.remote() for member in [learner, *replicas]])
        return time.perf_counter() - start

    object_store = [object_store_version() for _ in range(versions)]
    broadcast = [broadcast_version() for _ in range(versions)]
    for actor in [learner, *replicas]:
        ray.kill(actor)
    return {"parameter_bytes": nbytes, "replicas": replica_count, "dtype": dtype, "bucket_mb": bucket_mb,
            "object_store_s_per_version": statistics.median(object_store),
            "broadcast_s_per_version": statistics.median(broadcast),
            "object_store_s": object_store, "broadcast_s": broadcast,
            "memcpy_gb_per_s": memcpy_gb_per_s(min(nbytes, 1 << 30))}


def report(figures: dict) -> str:
    gb = figures["parameter_bytes"] / 1e9
    rows = [[path, f"{figures[key]:.2f}", f"{gb * figures['replicas'] / figures[key]:.2f}"]
            for path, key in (("object store (today)", "object_store_s_per_version"),
                              ("bucketed gloo broadcast", "broadcast_s_per_version"))]
    return "\n".join([
        "## weight_sync: full-weight sync per version (benchmarks/weight_sync.py)", "",
        f"Machine: {machine(with_load=True)}. Date: {time.strftime('%Y-%m-%d')}. A Qwen2-0.5B-shaped translator, "
        f"LoRA off, {figures['dtype']}: {gb:.2f} GB per version, to {figures['replicas']} replicas on this host, "
        f"each installing before it could sample; {figures['bucket_mb']} MB buckets. Median of the versions timed.",
        "", markdown_table(["path", "s / version", "GB/s delivered (all replicas)"], rows), "",
        f"Memory-copy bandwidth in the same run: {figures['memcpy_gb_per_s']:.1f} GB/s."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=2, help="policy replicas (the shared RAM allows 2)")
    parser.add_argument("--versions", type=int, default=3, help="versions timed per path")
    parser.add_argument("--dtype", default="bfloat16", help="parameter dtype (the GPU preset's translator.dtype)")
    parser.add_argument("--bucket-mb", type=int, default=256, help="broadcast bucket size")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        figures = measure(args.replicas, args.versions, args.dtype, args.bucket_mb)
    finally:
        ray.shutdown()
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
