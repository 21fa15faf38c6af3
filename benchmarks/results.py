"""Shared by the benchmark scripts: Markdown tables and the append-only RESULTS.md log."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def publish(report: str, append: bool = True) -> None:
    """Print a benchmark's report and, unless told not to, append it to RESULTS.md."""
    print(report)
    if append:
        with RESULTS.open("a") as results:
            results.write(("\n\n" if RESULTS.exists() and RESULTS.stat().st_size else "") + report + "\n")
