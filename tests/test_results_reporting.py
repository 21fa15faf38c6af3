"""Benchmark reporting: RESULTS.md, read on other machines, names no path of the one measured on."""

import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from benchmarks import results
from benchmarks.results import MachineSpecificPath, machine_specific_paths, portable, publish, seeds_in_words


RESULTS_FILES = [results.RESULTS, *sorted((results.REPOSITORY / "research").glob("*/RESULTS.md"))]
"""benchmarks/RESULTS.md and each research study's own."""


@pytest.mark.parametrize("path", RESULTS_FILES, ids=lambda path: str(path.relative_to(results.REPOSITORY)))
def test_results_md_names_no_machine_specific_path(path):
    text = path.read_text()
    assert machine_specific_paths(text) == []
    assert portable(text) == text


def test_publish_writes_portable_paths_and_refuses_other_machine_paths(tmp_path, monkeypatch, capsys):
    log = tmp_path / "RESULTS.md"
    monkeypatch.setattr(results, "RESULTS", log)
    scratch = Path(tempfile.gettempdir()).resolve() / "bench"
    publish(f"Config data.dir={scratch}/data plot={results.REPOSITORY}/benchmarks/learning.png", "bench")
    written = ("<!-- section: bench -->\nConfig data.dir=$TMPDIR/bench/data plot=./benchmarks/learning.png\n"
               "<!-- /section: bench -->\n")
    assert log.read_text() == written
    with pytest.raises(MachineSpecificPath, match=r"/work/exp/data"):
        publish("Config data.dir=/work/exp/data, served at POST /v1/answer", "bench")
    assert "/work/exp/data" in capsys.readouterr().out
    assert log.read_text() == written
    assert machine_specific_paths("GPU preset reads /data/infoseek; route /v1/answer") == []


def test_a_benchmark_replaces_its_own_section_and_leaves_the_others(tmp_path, monkeypatch):
    log = tmp_path / "RESULTS.md"
    monkeypatch.setattr(results, "RESULTS", log)
    log.write_text("# Results\n\nIntro.\n")
    publish("## Chaos (day 1)\n\nold", "chaos")
    publish("## Serving (day 1)", "serve")
    publish("## Chaos (day 2)\n\nnew", "chaos")
    assert log.read_text() == ("# Results\n\nIntro.\n\n"
                               "<!-- section: chaos -->\n## Chaos (day 2)\n\nnew\n<!-- /section: chaos -->\n\n"
                               "<!-- section: serve -->\n## Serving (day 1)\n<!-- /section: serve -->\n")
    assert [path.name for path in tmp_path.iterdir()] == ["RESULTS.md"]


def test_a_section_without_its_end_marker_is_named_not_overwritten(tmp_path, monkeypatch):
    log = tmp_path / "RESULTS.md"
    monkeypatch.setattr(results, "RESULTS", log)
    log.write_text("<!-- section: chaos -->\n## Chaos\n")
    with pytest.raises(ValueError, match="'chaos' has no end marker"):
        publish("## Chaos again", "chaos")
    assert log.read_text() == "<!-- section: chaos -->\n## Chaos\n"


def test_a_study_publishes_to_its_own_results_file_and_leaves_the_benchmarks_one_alone(tmp_path, monkeypatch):
    benchmarks_log = tmp_path / "RESULTS.md"
    benchmarks_log.write_text("# Benchmark results\n")
    monkeypatch.setattr(results, "RESULTS", benchmarks_log)
    study_log = tmp_path / "study" / "RESULTS.md"
    study_log.parent.mkdir()
    publish("## Probe\n", "probe", results=study_log)
    assert study_log.read_text() == "<!-- section: probe -->\n## Probe\n<!-- /section: probe -->\n"
    assert benchmarks_log.read_text() == "# Benchmark results\n"


@pytest.mark.parametrize("path", RESULTS_FILES, ids=lambda path: str(path.relative_to(results.REPOSITORY)))
def test_every_section_of_results_md_is_closed_and_appears_once(path):
    text = path.read_text()
    starts = re.findall(r"<!-- section: (\S+) -->", text)
    assert starts and len(starts) == len(set(starts))
    assert re.findall(r"<!-- /section: (\S+) -->", text) == starts


def test_overrides_name_machine_paths_by_their_role():
    scratch = Path(tempfile.gettempdir()).resolve() / "d"
    assert results.portable_overrides(["data.dir=/work/exp/data", f"index.dir={scratch}", "train.steps=5"]) == (
        "data.dir=DATA_DIR index.dir=$TMPDIR/d train.steps=5")


def test_figures_are_written_even_when_the_report_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "RESULTS", tmp_path / "RESULTS.md")
    figures = tmp_path / "results" / "bench.json"
    with pytest.raises(MachineSpecificPath):
        results.publish_figures("measured on /work/exp", {"ratio": 1.5}, figures)
    assert json.loads(figures.read_text()) == {"ratio": 1.5}
    assert not (tmp_path / "RESULTS.md").exists()
    results.publish_figures("not kept", {"ratio": 2.0}, tmp_path / "other.json", write=False)
    assert not (tmp_path / "other.json").exists()


def test_every_report_names_the_machine_alike_and_the_load_only_when_asked():
    assert results.machine().endswith(f", {os.cpu_count()} logical cores")
    assert results.machine(with_load=True).startswith(results.machine() + ", load average ")


def test_a_heading_names_its_seeds_so_two_invocations_over_other_seeds_write_two_sections():
    assert seeds_in_words([4, 3]) == "seeds 3, 4"
    assert seeds_in_words({0}) == "seed 0"
