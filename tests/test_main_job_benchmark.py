"""benchmarks/main_job.py times the README's own main job and reads the held-out table `mmrag train` prints last."""

from __future__ import annotations

from benchmarks.main_job import held_out_table, readme_commands


def test_the_held_out_table_is_read_to_its_last_row():
    stdout = "\n".join([
        "run directory: runs/train",
        "exported: step 125 (train.export: best-val)",
        f"{'held-out':<20}{'untrained':>12}{'exported':>12}",
        f"{'reward_mean':<20}{0.5:>12.3f}{0.890625:>12.3f}",
        f"{'reward visual':<20}{1.0:>12.3f}{1.0:>12.3f}",
        "a log line after the table",
    ])
    read = held_out_table(stdout)
    assert read["exported_line"] == "exported: step 125 (train.export: best-val)"
    assert read["table"] == {"reward_mean": {"untrained": 0.5, "exported": 0.891},
                             "reward visual": {"untrained": 1.0, "exported": 1.0}}


def test_the_commands_timed_are_the_readmes_main_job():
    readme = "\n".join(["```bash", "python3.11 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/mmrag zoo && "
                        ".venv/bin/mmrag synth && .venv/bin/mmrag train --steps 5", "```", "```bash",
                        "python3.11 -m venv .venv && .venv/bin/pytest -q", "```"])
    assert readme_commands(readme) == [["zoo"], ["synth"], ["train", "--steps", "5"]]
