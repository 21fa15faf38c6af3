"""The command line: README and CI agree, every command explains its options, answers `--help` at once (without
importing torch or Ray), `mmrag --version` names the version, `plan` without a cluster points at --cluster-yaml, and
`serve --host/--port` choose where it listens."""

import os
import resource
import socket
import re
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest

from mmrag.pipelines.cli import COMMANDS, build_parser, main
from mmrag.pipelines.options import config_from_args

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command():
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    quickstart = [b for b in blocks if b.startswith("python3.11 -m venv")]
    assert len(quickstart) == 2, "the Quickstart has exactly two commands"
    ci_lines = [line for line in (ROOT / ".ci/run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    *setup, test_command = ci_lines
    assert test_command == quickstart[1]
    assert [line for line in setup if "pytest" in line or "pip" in line] == [], "CI installs and tests as the README"


def test_readme_links_only_to_files_inside_the_repository():
    targets = re.findall(r"\]\(([^)#\s]+)", (ROOT / "README.md").read_text())
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to its architecture document"
    assert [t for t in local if not (ROOT / t).resolve().is_relative_to(ROOT)] == []


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_has_help(command):
    parser = build_parser(command)
    sub = parser._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        if action.dest != "help":
            assert action.help, f"mmrag {command} {action.option_strings}: no help text"


def test_module_entry_point_help():
    out = subprocess.run([sys.executable, "-m", "mmrag.pipelines.synth", "--help"], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout
    assert out.startswith("usage: python -m mmrag.pipelines.synth") and "--entities" in out


def test_bad_override_is_one_line_error_and_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["synth", "--set", "data.nope=1"])
    assert exit_info.value.code == 2
    assert "data.nope: unknown key" in capsys.readouterr().err


def test_an_offline_cpu_config_puts_the_command_offline_on_cpu(monkeypatch):
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DS_ACCELERATOR", "TOKENIZERS_PARALLELISM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    config_from_args(build_parser("index").parse_args(["index", "--config", str(ROOT / "mmrag/configs/local.yaml")]))
    assert huggingface_hub.constants.HF_HUB_OFFLINE is True
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["DS_ACCELERATOR"] == "cpu"


@pytest.mark.slow  # builds models and an index on Ray (31 s)
def test_default_commands_print_no_warning(tmp_path, synth_dir):
    # A fresh zoo cache, so building the random tiny CLIP and saving the tiny LVLM (what
    # used to warn of random weights and of DeepSpeed's accelerator guess) happens here.
    # Without RAY_ADDRESS (which the session's Ray sets), `mmrag index` starts its own Ray, as a user's does.
    env = {k: v for k, v in os.environ.items() if k not in ("DS_ACCELERATOR", "PYTHONWARNINGS", "RAY_ADDRESS")}
    dirs = [f"--set=zoo.cache_dir={tmp_path / 'zoo'}", f"--set=data.dir={synth_dir}",
            f"--set=index.dir={tmp_path / 'index'}", "--set=encoder.pretrained=zoo:tiny-clip-init"]
    for command in (["zoo", "--only", "tiny-clip-init", "tiny-lvlm"], ["index"]):
        result = subprocess.run([sys.executable, "-m", "mmrag.pipelines.cli", *command, *dirs], capture_output=True,
                                text=True, cwd=ROOT, env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        lines = (result.stdout + result.stderr).replace("\r", "\n").splitlines()
        # Ray's notice that a new local Ray has token authentication on is true and says how to opt out.
        warnings = [line for line in lines if "warn" in line.lower() and "Token authentication is enabled" not in line]
        assert warnings == [], f"mmrag {command[0]}"
        # Offline, loading or saving a local checkpoint is not news worth a progress bar.
        assert [line for line in lines if "Loading weights" in line or "Writing model shards" in line] == []


def test_version_prints_the_package_version(capsys):
    import mmrag

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"mmrag {mmrag.__version__}"


HELP_CPU_S = 2.0
"""Most CPU seconds `mmrag COMMAND --help` may take (CPU, not wall time: the machine may be shared)."""


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_answers_within_two_cpu_seconds_without_importing_torch_or_ray(command):
    probe = ("import sys\nfrom mmrag.pipelines.cli import main\ntry:\n    main([sys.argv[1], '--help'])\n"
             "except SystemExit:\n    pass\nprint(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = subprocess.run([sys.executable, "-c", probe, command], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert f"usage: mmrag {command}" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]", f"mmrag {command} --help imported heavy modules"
    assert cpu_s < HELP_CPU_S, f"mmrag {command} --help took {cpu_s:.2f} CPU s"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_plan_without_a_cluster_says_so_and_points_at_cluster_yaml(capsys):
    address = f"127.0.0.1:{free_port()}"
    assert main(["plan", "--config", "gpu_qwen2vl", "--address", address]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"plan: cannot read the cluster's capacity: nothing answers at {address}")
    assert "--cluster-yaml FILE" in error


def test_serve_listens_where_host_and_port_say(tiny_export, capsys):
    """The port is taken, so serve stops before Ray starts, naming the address it was told to listen on."""
    _, export, _ = tiny_export
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--checkpoint", str(export), "--host", "127.0.0.1", "--port", str(port)]) == 2
    assert f"serve: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
