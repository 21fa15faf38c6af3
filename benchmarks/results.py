"""Shared by the benchmark scripts: Markdown tables and the append-only RESULTS.md log.

RESULTS.md is read on other machines, so a report names no path of the machine it was
measured on: `publish` writes the repository, the home and the temporary directory as
`.`, `~` and `$TMPDIR`, and refuses a report that still names another such path.
"""

from __future__ import annotations

import json
import os
import platform
import re
import tempfile
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
REPOSITORY = Path(__file__).resolve().parents[1]
MACHINE_ROOTS = ("root", "tmp", "work", "home", "Users", "mnt", "scratch", "private", "var")
"""Top-level directories whose paths belong to one machine (data presets use others, e.g. /data)."""
_ABSOLUTE_PATH = re.compile(r"(?<![\w.$~/-])/(?:" + "|".join(MACHINE_ROOTS) + r")(?:/[^\s`'\")\],;]*)?")


class MachineSpecificPath(ValueError):
    """A report that would write a path of this machine into RESULTS.md."""


def machine(with_load: bool = False) -> str:
    """This machine as every report names it: platform, architecture, logical cores (and the load average now)."""
    text = f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} logical cores"
    return f"{text}, load average {os.getloadavg()[0]:.1f} at the end" if with_load else text


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def portable(text: str) -> str:
    """`text` with this repository, the home and the temporary directory written as `.`, `~`, `$TMPDIR`."""
    for prefix, name in ((REPOSITORY, "."), (Path(tempfile.gettempdir()).resolve(), "$TMPDIR"),
                         (Path.home().resolve(), "~")):
        text = re.sub(re.escape(str(prefix)) + r"(?=/|\b)", lambda _: name, text)
    return text


def machine_specific_paths(text: str) -> list[str]:
    """Absolute paths under a machine's own directories (/root, /tmp, /work, /home, ...) in `text`."""
    return _ABSOLUTE_PATH.findall(text)


def portable_assignment(assignment: str) -> str:
    """`KEY=VALUE` as a report may name it: a path of this machine becomes the key's role (data.dir=DATA_DIR)."""
    key, _, value = assignment.partition("=")
    if machine_specific_paths(portable(value)):
        return f"{key}={key.replace('.', '_').upper()}"
    return portable(assignment)


def portable_overrides(assignments: list[str]) -> str:
    """Config overrides as a report names them, space-separated (see `portable_assignment`)."""
    return " ".join(portable_assignment(assignment) for assignment in assignments)


def publish_figures(report: str, figures: dict | list, json_path: Path, append: bool = True) -> None:
    """Write a benchmark's figures to `json_path`, then `publish` its report (neither when `append` is off).

    The JSON comes first, so a report refused for naming a machine path still leaves its figures.
    """
    if append:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
    publish(report, append=append)


def publish(report: str, append: bool = True) -> None:
    """Print a benchmark's report and, unless told not to, append it to RESULTS.md.

    Raises MachineSpecificPath (after printing) when the report names a path that only
    exists on this machine; nothing is appended then.
    """
    report = portable(report)
    print(report)
    if not append:
        return
    paths = machine_specific_paths(report)
    if paths:
        raise MachineSpecificPath(
            f"{RESULTS.name}: not appended, the report names paths of this machine ({', '.join(sorted(set(paths)))}); "
            "name them by role (e.g. DATA_DIR) or put them under $TMPDIR, the home or the repository, "
            "then append the report printed above by hand")
    with RESULTS.open("a") as results:
        results.write(("\n\n" if RESULTS.exists() and RESULTS.stat().st_size else "") + report + "\n")
