"""Shared by the benchmark scripts: Markdown tables, the machine line, and RESULTS.md.

RESULTS.md is a report with one current section per benchmark, between the markers
`<!-- section: NAME -->` and `<!-- /section: NAME -->`: a benchmark that runs replaces its
own section and leaves the others as they are (earlier figures live in git's history).
Each section says machine, date, config and what its figures rest on.

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

from mmrag.atomic import atomic_write_text

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


def seeds_in_words(seeds) -> str:
    """`seeds 3, 4`: a section heading names its seeds, so two invocations over other seeds of the same runs write
    two sections that tell themselves apart."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(seed) for seed in sorted(seeds))}"


def config_in_words(config: str | None, assignments: list[str]) -> str:
    """The config a report ran with: the file or preset (or the embedded defaults) and its portable overrides."""
    return " ".join(filter(None, [config or "(embedded defaults)", portable_overrides(assignments)]))


def publish_figures(report: str, figures: dict | list, json_path: Path, write: bool = True,
                    results: Path | None = None) -> None:
    """Write a benchmark's figures to `json_path`, then `publish` its report as the section named after the
    JSON file (results/NAME.json: section NAME) of `results` (default: benchmarks/RESULTS.md); neither when
    `write` is off.

    The JSON comes first, so a report refused for naming a machine path still leaves its figures.
    """
    if write:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(json_path, json.dumps(figures, indent=2) + "\n")
    publish(report, json_path.stem, write=write, results=results)


def publish(report: str, section: str, write: bool = True, results: Path | None = None) -> None:
    """Print a benchmark's report and, unless told not to, make it the section `section` of `results`
    (default: benchmarks/RESULTS.md; a research study passes its own RESULTS.md).

    Raises MachineSpecificPath (after printing) when the report names a path that only
    exists on this machine; the results file is left as it was then.
    """
    results = results or RESULTS
    report = portable(report)
    print(report)
    if not write:
        return
    paths = machine_specific_paths(report)
    if paths:
        raise MachineSpecificPath(
            f"{results.name}: not written, the report names paths of this machine ({', '.join(sorted(set(paths)))}); "
            "name them by role (e.g. DATA_DIR) or put them under $TMPDIR, the home or the repository, "
            "then paste the report printed above into its section by hand")
    atomic_write_text(results, with_section(results.read_text() if results.exists() else "", section, report))


def with_section(text: str, name: str, report: str) -> str:
    """`text` (RESULTS.md) with section `name` replaced by `report`, or `report` added at the end as that section."""
    start, end = f"<!-- section: {name} -->", f"<!-- /section: {name} -->"
    block = f"{start}\n{report.strip()}\n{end}"
    if start not in text:
        return (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
    before, _, rest = text.partition(start)
    if end not in rest:
        raise ValueError(f"{RESULTS.name}: section {name!r} has no end marker {end!r}; add it after the section")
    return before + block + rest.partition(end)[2]
