"""Zoo build: the whole zoo built into an empty cache in order in one process, and by `build_models`'s worker
processes (one per independent chain of fits), one after the other in one invocation.

Both runs fit with one torch thread per process, as the test suite does (`tests/conftest.py`: two threads on two
busy cores made the tiny models ~20x slower). Each model's build seconds come from its `zoo.json`; `same bytes`
says whether the two runs produced identical files (everything but the manifest), i.e. whether a model's fit
depends on the process it ran in. Results: benchmarks/results/zoo_build.json, a section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.model_refs import MODELS, read_manifest
from mmrag.zoo.parallel_build import build_models

RESULTS_JSON = Path(__file__).with_name("results") / "zoo_build.json"


def model_files(cache: Path, name: str) -> dict[str, bytes]:
    """Every file of a built model but its manifest (which records the build's seconds), by relative path."""
    root = cache / name
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "zoo.json"}


def timed_build(cache: Path, workers: int) -> dict:
    started = time.perf_counter()
    build_models(list(MODELS), str(cache), workers=workers)
    seconds = time.perf_counter() - started
    return {"workers": workers, "seconds": round(seconds, 1),
            "build_seconds": {name: read_manifest(cache / name)["build_seconds"] for name in MODELS}}


def measure(workers: int) -> dict:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as in_order, tempfile.TemporaryDirectory() as in_workers:
        sequential = timed_build(Path(in_order), 1)
        parallel = timed_build(Path(in_workers), workers)
        same = {name: model_files(Path(in_order), name) == model_files(Path(in_workers), name) for name in MODELS}
    return {"date": datetime.date.today().isoformat(), "machine": machine(with_load=True),
            "sequential": sequential, "parallel": parallel,
            "speedup": round(sequential["seconds"] / parallel["seconds"], 2), "same_bytes": same}


def report(figures: dict) -> str:
    sequential, parallel = figures["sequential"], figures["parallel"]
    rows = [[name, f"{sequential['build_seconds'][name]:.1f}", f"{parallel['build_seconds'][name]:.1f}",
             ", ".join(MODELS[name].needs) or "-", "yes" if figures["same_bytes"][name] else "no"] for name in MODELS]
    rows.append(["**whole zoo (wall)**", f"**{sequential['seconds']:.1f}**", f"**{parallel['seconds']:.1f}**", "",
                 "yes" if all(figures["same_bytes"].values()) else "no"])
    return "\n\n".join([
        f"## Zoo build: in order against parallel workers ({figures['date']})",
        f"Machine: {figures['machine']}. `python -m benchmarks.zoo_build --workers {parallel['workers']}`: every "
        "zoo model built into an empty cache, first in order in one process, then by "
        f"`mmrag.zoo.parallel_build.build_models` with {parallel['workers']} worker processes (a model starts once "
        "the models it starts from are built); one torch thread per process in both runs, as in the test suite.",
        markdown_table(["model", "in order s", f"{parallel['workers']} workers s", "starts from", "same bytes"], rows),
        f"Whole zoo: **{figures['speedup']:.2f}x** faster in workers. A model's seconds in the parallel run include "
        "the other worker's competition for memory bandwidth; the wall time is what a user (and the suite's zoo "
        "fixture) waits.",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes of the parallel run")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    figures = measure(args.workers)
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
