"""What one `build_index` call did and what it cost: the `BuildReport`, and peak-memory readings.

Filled in by `mmrag.retrieval.build` from the summaries its workers send back; printed by
`mmrag index` and recorded by `benchmarks/index_scale.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mmrag.retrieval.manifest import Manifest


def peak_rss_mb() -> float:
    """This process's peak resident memory since it started, in MiB: Linux's VmHWM.

    Not ru_maxrss, which a process keeps across exec from the one that forked it, so that a
    small child of a big parent would report the parent's size.
    """
    with open("/proc/self/status") as status:
        peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    return peak_kib / 1024


@dataclass
class BuildReport:
    manifest: Manifest
    rebuilt: bool
    """False when the existing index already matched (no-op)."""
    reason: str
    """Why it was (re)built or left alone, e.g. "KB changed" or "unchanged"."""
    seconds: float
    workers: int = 0
    """Encoder workers of the embedding stage; 0 means in-process (`--local`)."""
    rows_embedded: int = 0
    """KB rows read and embedded by this call (parts persisted by an earlier, interrupted call excluded)."""
    parts_reused: int = 0
    """KB parts whose persisted embeddings this call reused."""
    embed_seconds: float = 0.0
    """Wall time of the embedding stage (worker start-up included)."""
    index_seconds: float = 0.0
    """Wall time of the FAISS and doc-store stage."""
    peak_rss_mb_driver: float = 0.0
    """Peak RSS of the calling process (with --local it holds the FAISS indexes too)."""
    peak_rss_mb_worker: float = 0.0
    """Highest peak RSS of an encoder worker (the driver itself with --local)."""
    peak_rss_mb_writer: float = 0.0
    """Highest peak RSS of a shard-writing process less the FAISS index it built (0 with --local)."""
