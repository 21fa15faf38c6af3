"""Weight sync: seconds per published version through the object store and through the runtime's bucketed broadcast
(`learner.weight_sync`: `mmrag.training.weight_broadcast` over a process group of its own, gloo here, NCCL on GPUs),
for the full weights of a 0.5 B translator (LoRA off) and for its LoRA adapters.

A learner actor holds a translator-sized causal LM (Qwen2-0.5B's shape, randomly initialised: nothing is
downloaded) and `--replicas` replica actors hold the same architecture. One version is synced when every
replica has installed it (copied into its own parameters) and could sample:

* object store: the learner returns its weights from a call (one copy into the store, as rank 0's `update`
  does), each replica is handed the nested reference, fetches it and copies it into its parameters;
* broadcast: the learner and the replicas are one sync group; the learner sends the weights in buckets of
  `--bucket-mb` (`send_state`), each replica receives them (`receive_state`) and copies them in.

The same two paths are timed for the LoRA adapters the GPU preset trains (rank 16 on q/k/v/o, float32). The
machine's memory-copy bandwidth (one large tensor copy) is measured in the same run, as the yardstick both paths
are bounded by on one host. Results: benchmarks/results/weight_sync.json, a section of RESULTS.md.
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
from mmrag.training.weight_broadcast import join_sync_group, receive_state, send_state, serve_sync_store

RESULTS_JSON = Path(__file__).with_name("results") / "weight_sync.json"
QWEN2_05B_SHAPE = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                   "tie_word_embeddings": True}
"""Qwen2-0.5B-Instruct's architecture: ~494 M parameters."""


def build_model(dtype: str) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.device("cpu"):
        return Qwen2ForCausalLM(Qwen2Config(**QWEN2_05B_SHAPE)).to(getattr(torch, dtype))


def lora_adapters(rank: int = 16) -> dict[str, torch.Tensor]:
    """LoRA A/B matrices of rank `rank` on every layer's q/k/v/o projections of the Qwen2-0.5B shape, float32."""
    hidden, kv = QWEN2_05B_SHAPE["hidden_size"], 128  # 2 key-value heads of 64
    shapes = {"q_proj": (hidden, hidden), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (hidden, hidden)}
    torch.manual_seed(0)
    return {f"layers.{layer}.{name}.lora_{part}": torch.randn(*(rank, fan_in) if part == "A" else (fan_out, rank))
            for layer in range(QWEN2_05B_SHAPE["num_hidden_layers"]) for name, (fan_in, fan_out) in shapes.items()
            for part in "AB"}


@ray.remote(num_cpus=0)
class WeightHolder:
    """The learner (member 0 of the sync group) or a policy replica: the weights of one payload (the model's
    parameters, or LoRA adapters) and its place in the sync group."""

    def __init__(self, payload: str, dtype: str, bucket_mb: int):
        torch.set_num_threads(1)
        self.weights = (dict(build_model(dtype).named_parameters()) if payload == "full"
                        else lora_adapters())
        self.weights = {name: tensor.detach() for name, tensor in self.weights.items()}
        self.bucket_bytes = bucket_mb << 20

    def parameter_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.weights.values())

    def rendezvous(self, world: int) -> tuple[str, int]:
        self.store = serve_sync_store(world)
        return "127.0.0.1", self.store.port

    def join(self, rank: int, world: int, address: str, port: int) -> None:
        self.group = join_sync_group(getattr(self, "store", None), address, port, rank, world, timeout_s=600)
        self.rank = rank

    def state_dict(self) -> dict:
        """The object-store path on the learner: the whole state, returned into the object store."""
        return self.weights

    def install(self, state: dict) -> None:
        with torch.no_grad():
            for name, tensor in state.items():
                self.weights[name].copy_(tensor)

    def install_from_store(self, nested: list) -> int:
        self.install(ray.get(nested[0]))
        return 1

    def broadcast(self) -> int:
        """Every member calls it: rank 0 sends bucket by bucket, the others receive and install."""
        if self.rank == 0:
            send_state(self.group, self.weights, self.bucket_bytes)
        else:
            self.install(receive_state(self.group, self.weights, self.bucket_bytes))
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


def measure(payload: str, replica_count: int, versions: int, dtype: str, bucket_mb: int) -> dict:
    """Seconds per version of both paths for one payload ("full" or "lora")."""
    learner = WeightHolder.remote(payload, dtype, bucket_mb)
    replicas = [WeightHolder.remote(payload, dtype, bucket_mb) for _ in range(replica_count)]
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
    return {"parameter_bytes": nbytes, "object_store_s_per_version": statistics.median(object_store),
            "broadcast_s_per_version": statistics.median(broadcast), "object_store_s": object_store,
            "broadcast_s": broadcast}


def measure_all(replica_count: int, versions: int, dtype: str, bucket_mb: int) -> dict:
    """Full weights (LoRA off) at the top level, as before; the LoRA adapters under "lora"; the memcpy yardstick."""
    full = measure("full", replica_count, versions, dtype, bucket_mb)
    lora = measure("lora", replica_count, versions, dtype, bucket_mb)
    return {**full, "replicas": replica_count, "dtype": dtype, "bucket_mb": bucket_mb,
            "broadcast_speedup": full["object_store_s_per_version"] / full["broadcast_s_per_version"],
            "memcpy_gb_per_s": memcpy_gb_per_s(min(full["parameter_bytes"], 1 << 30)), "lora": lora}


def report(figures: dict) -> str:
    gb, lora_mb = figures["parameter_bytes"] / 1e9, figures["lora"]["parameter_bytes"] / 1e6
    rows = [[payload, path, f"{part[key]:.3f}",
             f"{part['parameter_bytes'] / 1e9 * figures['replicas'] / part[key]:.2f}"]
            for payload, part in ((f"full weights ({gb:.2f} GB)", figures), (f"LoRA adapters ({lora_mb:.1f} MB)",
                                                                               figures["lora"]))
            for path, key in (("object store", "object_store_s_per_version"),
                              ("bucketed gloo broadcast", "broadcast_s_per_version"))]
    return "\n".join([
        "## weight_sync: weight sync per version (benchmarks/weight_sync.py)", "",
        f"Machine: {machine(with_load=True)}. Date: {time.strftime('%Y-%m-%d')}. A Qwen2-0.5B-shaped translator: "
        f"its full weights (LoRA off, {figures['dtype']}) and its rank-16 q/k/v/o LoRA adapters (float32), to "
        f"{figures['replicas']} replicas on this host, each installing before it could sample; "
        f"{figures['bucket_mb']} MB buckets; the broadcast is the runtime's own (`learner.weight_sync: broadcast`, "
        f"mmrag/training/weight_broadcast.py). Median of the versions timed.", "",
        markdown_table(["payload", "path", "s / version", "GB/s delivered (all replicas)"], rows), "",
        f"Full weights: the broadcast is {figures['broadcast_speedup']:.1f}x faster per version. Memory-copy "
        f"bandwidth in the same run: {figures['memcpy_gb_per_s']:.1f} GB/s."])


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
        figures = measure_all(args.replicas, args.versions, args.dtype, args.bucket_mb)
    finally:
        ray.shutdown()
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
