"""The markdown summary of a run: first and last held-out evaluations, the plots, example queries."""

from __future__ import annotations

from pathlib import Path

from mmrag.report.plots import split_records


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def evaluation_table(records: list[dict]) -> list[str]:
    evals = split_records(records)["eval"]
    if not evals:
        return ["No held-out evaluation was logged."]
    first, last = evals[0], evals[-1]
    names = [name for name in first if name != "step" and isinstance(first[name], (int, float))]
    lines = [f"| metric | step {first['step']} | step {last['step']} | change |", "|---|---:|---:|---:|"]
    for name in names:
        before, after = first[name], last.get(name, float("nan"))
        lines.append(f"| {name} | {before:.3f} | {after:.3f} | {after - before:+.3f} |")
    return lines


def examples_table(examples: dict) -> list[str]:
    lines = [f"| question | answers | {_cell(examples['early'])} | {_cell(examples['late'])} |",
             "|---|---|---|---|"]
    for row in examples["rows"]:
        lines.append(f"| {_cell(row['question'])} | {_cell(', '.join(row['answers']))} | "
                     f"{_cell(row['early'])} | {_cell(row['late'])} |")
    return lines


def write_summary(run_dir: str | Path, records: list[dict], plots: list[Path], examples: dict | None,
                  out_path: str | Path) -> Path:
    """REPORT.md: training steps logged, the evaluation table, the plots, and the example queries."""
    steps = split_records(records)["train"]
    lines = [f"# Training report: {run_dir}", "",
             f"{len(steps)} training steps logged (last step {steps[-1]['step'] if steps else 0}).", "",
             "## Held-out evaluation (greedy)", "", *evaluation_table(records), "", "## Curves", ""]
    out_path = Path(out_path)
    lines += [f"![{plot.stem}]({plot.relative_to(out_path.parent)})" for plot in plots]
    lines += ["", "## Example queries (same validation questions)", ""]
    lines += examples_table(examples) if examples else ["No exported checkpoint: no example queries."]
    out_path.write_text("\n".join(lines) + "\n")
    return out_path
