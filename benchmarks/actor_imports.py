"""What each actor process pays before its constructor runs: the CPU seconds to import its class's module.

A Ray worker handed an actor class imports the class's module first (classes travel by reference), in a
fresh interpreter: every actor of every run, replica and restart pays it again, and on a 2-core machine the
test suite's distributed runs spent most of their CPU there (docs/ARCHITECTURE.md §3). For each actor module,
in fresh interpreters one after the other: the CPU seconds (user + system) of `import MODULE` (median of
`--repeats`) and the model libraries it loaded. With `--baseline REF` the same is measured on a checkout of
that git revision in the same run, run for run in turn with this one, for a ratio that this machine's drifting
speed does not blur.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.results import REPOSITORY, machine, markdown_table, publish_figures

RESULTS_JSON = Path(__file__).with_name("results") / "actor_imports.json"
ACTOR_MODULES = {
    "TranslatorActor": "mmrag.actors.translator",
    "EncoderActor": "mmrag.actors.encoder",
    "RetrievalShard": "mmrag.actors.retrieval",
    "RerankerActor": "mmrag.actors.reranker",
    "GeneratorActor": "mmrag.actors.generator",
    "RewardActor": "mmrag.actors.reward",
    "LearnerRank": "mmrag.actors.learner",
}
MODEL_LIBRARIES = ("torch", "torchvision", "torch._dynamo", "transformers", "open_clip", "timm", "deepspeed")
PROBE = """
import json, resource, sys
import {module}
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({{"cpu_s": usage.ru_utime + usage.ru_stime, "file": {module}.__file__,
                   "libraries": [name for name in {libraries!r} if name in sys.modules]}}))
"""


def import_cost(module: str, checkout: Path) -> dict:
    """One fresh interpreter importing `module` from `checkout`: its CPU seconds and the model libraries loaded."""
    probe = PROBE.format(module=module, libraries=MODEL_LIBRARIES)
    done = subprocess.run([sys.executable, "-c", probe], cwd=checkout, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(checkout)})
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if not Path(figures.pop("file")).is_relative_to(checkout):
        raise RuntimeError(f"{module} was imported from outside {checkout} (an installed copy shadows it)")
    return figures


def measure_checkouts(checkouts: dict[str, Path], repeats: int) -> dict[str, dict[str, dict]]:
    """{checkout name: {actor: median CPU s, libraries}}; the checkouts alternate run by run, so that a drift of
    this machine's speed during the measurement falls on each alike."""
    runs = {name: {actor: [] for actor in ACTOR_MODULES} for name in checkouts}
    for actor, module in ACTOR_MODULES.items():
        for _ in range(repeats):
            for name, checkout in checkouts.items():
                runs[name][actor].append(import_cost(module, checkout))
    return {name: {actor: {"module": ACTOR_MODULES[actor],
                           "cpu_s": round(statistics.median(run["cpu_s"] for run in actor_runs), 2),
                           "libraries": actor_runs[0]["libraries"]}
                   for actor, actor_runs in by_actor.items()}
            for name, by_actor in runs.items()}


def baseline_checkout(ref: str, into: Path) -> Path:
    """A detached worktree of `ref` in `into` (the caller removes `into`, then prunes the worktree list)."""
    path = into / "baseline"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), ref], cwd=REPOSITORY, check=True)
    return path


def measure(repeats: int, baseline: str | None) -> dict:
    figures = {"date": datetime.date.today().isoformat(), "machine": machine(), "repeats": repeats}
    if not baseline:
        return {**figures, "now": measure_checkouts({"now": REPOSITORY}, repeats)["now"]}
    revision = subprocess.run(["git", "rev-parse", "--short", baseline], cwd=REPOSITORY, capture_output=True,
                              text=True, check=True).stdout.strip()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            measured = measure_checkouts({"now": REPOSITORY, "baseline": baseline_checkout(baseline, Path(tmp))},
                                         repeats)
    finally:
        subprocess.run(["git", "worktree", "prune"], cwd=REPOSITORY, check=True)
    return {**figures, "now": measured["now"], "baseline": {"ref": revision, "actors": measured["baseline"]}}


def report(figures: dict) -> str:
    now, base = figures["now"], figures.get("baseline")
    header = ["actor", "module", "CPU s to import", "model libraries loaded"]
    if base:
        header[2:2] = [f"CPU s at {base['ref']}"]
    rows = []
    for actor, row in now.items():
        cells = [actor, f"`{row['module']}`", f"{row['cpu_s']:.2f}", ", ".join(row["libraries"]) or "none"]
        if base:
            cells[2:2] = [f"{base['actors'][actor]['cpu_s']:.2f}"]
        rows.append(cells)
    total = sum(row["cpu_s"] for row in now.values())
    words = [f"## Actor start-up: the imports each actor process pays ({figures['date']})",
             f"Machine: {figures['machine']}. `python -m benchmarks.actor_imports"
             + (f" --baseline {base['ref']}" if base else "") + f"`: each actor's module imported in a fresh "
             f"interpreter, median CPU seconds (user + system) of {figures['repeats']} runs.",
             markdown_table(header, rows),
             f"One of each actor: {total:.1f} CPU s"]
    if base:
        before = sum(row["cpu_s"] for row in base["actors"].values())
        words[-1] += f" against {before:.1f} at {base['ref']} ({total / before:.2f}x)."
    else:
        words[-1] += "."
    return "\n\n".join(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters per actor module (median)")
    parser.add_argument("--baseline", metavar="REF", help="also measure this git revision, in the same run")
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    figures = measure(args.repeats, args.baseline)
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
