"""The soak benchmark, for about two minutes per run: faults every few seconds, a SIGTERM + --resume half-way, against
a calm run (`benchmarks/soak.py`; its 30-minute version is run by hand)."""

from __future__ import annotations

import pytest
import yaml

from benchmarks import soak
from mmrag.config import config_to_dict

pytestmark = pytest.mark.slow  # two distributed runs of a minute and more


def test_a_short_soak_survives_its_faults_and_its_stop_and_reports_the_figures(tiny_config, tmp_path, capsys):
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config_to_dict(tiny_config(tmp_path / "unused"))))
    figures = soak.main(["--config", str(config_file), "--minutes", "2", "--lags", "0", "--every-min", "8",
                         "--every-max", "12", "--stop-s", "5", "--print-only"])
    (run,) = figures["runs"]
    calm, chaos = run["calm"], run["soak"]
    assert calm["exit_codes"] == [0] and calm["steps"] > 0
    assert chaos["faults"]["driver SIGTERM + --resume"] == 1
    assert sum(chaos["faults"].values()) >= 2, "a fault besides the stop"
    assert chaos["exit_codes"] == [0, 0] and chaos["survived"], "\n".join(chaos["failure_tail"])
    assert chaos["rollouts_lost"] == 0 and chaos["trained_rollouts_in_order"]
    assert "| lag | steps calm / soak |" in capsys.readouterr().out
