"""Main job: the README's quickstart after the install, timed step by step as a new user meets it.

The commands are read from the README (its first Quickstart block, every `mmrag` command after the install), so
the figures are always those of the job the README tells a user to run.

Each command runs as its own process in an empty working directory with HOME an empty directory, so the zoo is
built from nothing inside the job (a user's first run) and no cache of this machine's is reused. The figures: each
command's wall seconds, each zoo model's build seconds (from its `zoo.json`), and the held-out table `mmrag train`
prints. Results: benchmarks/results/main_job.json, a section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.results import machine, markdown_table, publish_figures
from mmrag.model_refs import MODELS, read_manifest

RESULTS_JSON = Path(__file__).with_name("results") / "main_job.json"
README = Path(__file__).resolve().parents[1] / "README.md"
MMRAG = ".venv/bin/mmrag "


def readme_commands(readme: str) -> list[list[str]]:
    """The `mmrag` commands of the README's main job (its first Quickstart block), each as its arguments."""
    block = re.search(r"```bash\n(python3\.11 -m venv.*?)\n```", readme, re.S).group(1)
    return [command.strip().removeprefix(MMRAG).split() for command in block.split("&&")
            if command.strip().startswith(MMRAG)]


def run_command(mmrag: Path, args: list[str], cwd: Path, env: dict) -> dict:
    started = time.perf_counter()
    done = subprocess.run([str(mmrag), *args], cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"mmrag {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return {"command": "mmrag " + " ".join(args), "seconds": round(seconds, 1), "stdout": done.stdout}


def held_out_table(train_stdout: str) -> dict:
    """{metric: {untrained, exported}} from the table `mmrag train` prints last, and its exported step line."""
    lines = train_stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("held-out"))
    table = {}
    for line in lines[start + 1:]:
        name, *figures = line.rsplit(maxsplit=2)
        try:
            untrained, exported = map(float, figures)
        except ValueError:
            break  # the table has ended
        table[name] = {"untrained": untrained, "exported": exported}
    exported = next(line for line in lines if line.startswith("exported:"))
    return {"exported_line": exported, "table": table}


def measure(commands: list[list[str]]) -> dict:
    mmrag = Path(sys.executable).with_name("mmrag")
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as work:
        env = {**os.environ, "HOME": home}
        steps = [run_command(mmrag, args, Path(work), env) for args in commands]
        zoo = Path(home) / ".cache" / "mmrag" / "zoo"
        build_seconds = {name: manifest["build_seconds"] for name in MODELS
                         if (manifest := read_manifest(zoo / name)) is not None}
    held_out = held_out_table(steps[-1]["stdout"]) if commands[-1][0] == "train" else None
    for step in steps:
        del step["stdout"]
    return {"date": datetime.date.today().isoformat(), "machine": machine(with_load=True), "steps": steps,
            "total_seconds": round(sum(step["seconds"] for step in steps), 1),
            "zoo_build_seconds": build_seconds, "held_out": held_out}


def report(figures: dict) -> str:
    rows = [[f"`{step['command']}`", f"{step['seconds']:.0f}", f"{step['seconds'] / 60:.1f}"]
            for step in figures["steps"]]
    rows.append(["**total**", f"**{figures['total_seconds']:.0f}**", f"**{figures['total_seconds'] / 60:.1f}**"])
    zoo_rows = [[name, f"{seconds:.0f}"] for name, seconds in figures["zoo_build_seconds"].items()]
    parts = [
        f"## Main job: the README's quickstart from an empty home ({figures['date']})",
        f"Machine: {figures['machine']}. `python -m benchmarks.main_job`: each command in its own process, in an "
        "empty working directory with HOME an empty directory, so the zoo is built inside the job as on a user's "
        "first run (the install is not timed).",
        markdown_table(["command", "s", "min"], rows),
        "Zoo models built inside the job (each model's own build seconds, from its `zoo.json`):",
        markdown_table(["model", "build s"], zoo_rows),
    ]
    if figures["held_out"]:
        table = figures["held_out"]["table"]
        parts += [f"`mmrag train` {figures['held_out']['exported_line']}. Its held-out table is on the val questions "
                  "the best step is chosen on (`train.eval_questions`), so the exported figure is optimistic:",
                  markdown_table(["held-out", "untrained", "exported"],
                                 [[name, f"{v['untrained']:.3f}", f"{v['exported']:.3f}"] for name, v in table.items()])]
    return "\n\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-only", action="store_true", help="print only; leave RESULTS.md and the JSON alone")
    args = parser.parse_args()
    figures = measure(readme_commands(README.read_text()))
    publish_figures(report(figures), figures, RESULTS_JSON, write=not args.print_only)


if __name__ == "__main__":
    main()
