"""Draw the evolution report of a training run: PNG curves plus a markdown summary.

Reads RUN_DIR/metrics.jsonl (training steps and held-out evaluations) and RUN_DIR/config.json,
draws reward, documents kept, query length and retrieval recall over training, and writes
REPORT.md with the first-versus-last evaluation and example queries of the untrained and
the exported translator on the same validation questions (needs RUN_DIR/export and the
run's dataset).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mmrag.config import ConfigError, config_from_dict
from mmrag.report.examples import query_examples
from mmrag.report.plots import draw_plots
from mmrag.report.summary import write_summary
from mmrag.training.metrics_log import read_metrics
from mmrag.pipelines.options import apply_environment, run_main



def run(args: argparse.Namespace) -> int:
    run_dir = Path(args.run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        print(f"report: {run_dir}/metrics.jsonl not found (expected a run directory of `mmrag train`)",
              file=sys.stderr)
        return 2
    records = read_metrics(run_dir)
    out = Path(args.out) if args.out else run_dir / "report"
    plots = draw_plots(records, out)
    examples = None
    export = run_dir / "export"
    if args.examples > 0 and (export / "export.json").is_file():
        try:
            cfg = config_from_dict(json.loads((run_dir / "config.json").read_text()), args.overrides)
        except (OSError, ConfigError) as exc:
            print(f"report: {run_dir}/config.json: {exc}", file=sys.stderr)
            return 2
        apply_environment(cfg)
        examples = query_examples(cfg, export, args.examples)
    summary = write_summary(run_dir, records, plots, examples, out / "REPORT.md")
    print(f"wrote {summary} and {len(plots)} plots")
    return 0


if __name__ == "__main__":
    run_main(sys.modules[__name__])
