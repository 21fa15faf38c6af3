"""What every command does with its parsed options: load the config they name and give the process its
environment; and the `python -m mmrag.pipelines.COMMAND` entry point."""

from __future__ import annotations

import argparse
import os
import sys
import typing

import huggingface_hub.constants
import huggingface_hub.utils

from mmrag.cluster.runtime_env import job_env_vars
from mmrag.config import Config, ConfigError, load_config
from mmrag.pipelines.arguments import ARGUMENTS
from mmrag.pipelines.cli import run_command
from mmrag.presets import resolve_config
from mmrag.training.export_meta import export_config


def config_from_args(args: argparse.Namespace, export: str | None = None) -> Config:
    """Load the config named on the command line (without `--config`: the one `export` was trained with, when
    given; FileNotFoundError if it is not an export or its index is not found), or exit with a one-line error;
    then `apply_environment` it."""
    try:
        if args.config is None and export is not None:
            cfg = export_config(export, args.overrides)
        else:
            cfg = load_config(resolve_config(args.config), args.overrides)
    except ConfigError as exc:
        exit_config_error(exc)
    apply_environment(cfg)
    return cfg


def exit_config_error(error: ConfigError) -> typing.NoReturn:
    """`config error: ...` on stderr, exit status 2 (a usage error, as argparse's)."""
    print(f"config error: {error}", file=sys.stderr)
    sys.exit(2)


def apply_environment(cfg: Config) -> None:
    """Give this process the environment the config's jobs and actors get (offline switches,
    accelerator), before it loads any model."""
    os.environ.update(job_env_vars(cfg))
    # huggingface_hub reads HF_HUB_OFFLINE once, when first imported, and a command's modules
    # import it before the config is known: so it is told directly too.
    huggingface_hub.constants.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE or cfg.offline
    if cfg.offline:
        # Offline nothing is downloaded: the hub's bars would only show local checkpoints loading
        # and saving. transformers copies the hub's setting when first imported, so if it already
        # is, it is told too.
        huggingface_hub.utils.disable_progress_bars()
        if "transformers" in sys.modules:
            sys.modules["transformers"].utils.logging.disable_progress_bar()


def run_main(module) -> None:
    """`python -m mmrag.pipelines.<name>`: the same parser and run() as `mmrag <name>`."""
    name = module.__spec__.name if module.__spec__ else module.__name__
    parser = argparse.ArgumentParser(prog=f"python -m {name}", description=module.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    command = name.rsplit(".", 1)[-1]
    ARGUMENTS[command](parser)
    sys.exit(run_command(command, module.run, parser.parse_args()))
