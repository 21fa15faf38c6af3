"""The soak benchmark, for about two minutes per run: faults every few seconds, a SIGTERM + --resume half-way and a
worker node lost after it, against a calm run (`benchmarks/soak.py`; its 30-minute version is run by hand)."""

from __future__ import annotations

import psutil
import pytest
import yaml

from benchmarks import soak
from mmrag.config import config_to_dict

pytestmark = pytest.mark.slow  # two distributed runs of two minutes, each on a Ray cluster of three nodes


def _ray_nodes_running() -> set[int]:
    """This process's raylets and GCS servers (the suite's own Ray's among them, where it has started)."""
    return {p.pid for p in psutil.Process().children(recursive=True) if p.name() in ("raylet", "gcs_server")}


def test_a_short_soak_survives_its_faults_its_stop_and_a_lost_node_and_leaves_no_cluster_running(
        tiny_config, tmp_path, capsys):
    nodes_before = _ray_nodes_running()
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(tiny_config(tmp_path / "unused"))))
    figures = soak.main(["--config", str(config_file), "--minutes", "2", "--lags", "0", "--every-min", "8",
                         "--every-max", "12", "--stop-s", "5", "--print-only"])
    (run,) = figures["runs"]
    calm, chaos = run["calm"], run["soak"]
    assert calm["exit_codes"] == [0] and calm["steps"] > 0
    assert chaos["faults"]["driver SIGTERM + --resume"] == 1
    assert sum(chaos["faults"].values()) >= 3, "a fault besides the stop and the node lost"
    nodes_lost = {kind: n for kind, n in chaos["faults"].items() if kind.startswith("worker node lost")}
    assert sum(nodes_lost.values()) == 1, chaos["faults"]
    assert chaos["exit_codes"] == [0, 0] and chaos["survived"], "\n".join(chaos["failure_tail"])
    assert chaos["rollouts_lost"] == 0 and chaos["trained_rollouts_in_order"]
    assert "| lag | steps calm / soak |" in capsys.readouterr().out
    assert _ray_nodes_running() == nodes_before, "every run's private cluster shut down"
