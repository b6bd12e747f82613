"""`python -m nemotron.training.megatron_bridge COMMAND RUN_FOLDER`: one subcommand per thing a run folder
needs on the cluster (`upload`, `stage-in`, `train`), and `show` to print its plan."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nemotron.errors import NemotronError
from nemotron.training.megatron_bridge.cluster import stage_in, train, upload
from nemotron.training.megatron_bridge.plan import LaunchPlan


def show(run_folder: Path) -> None:
    """Print a run folder's configuration and commands (stderr, like every human-facing line)."""
    print(LaunchPlan(**json.loads((run_folder / "plan.json").read_text())).describe(), file=sys.stderr)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m nemotron.training.megatron_bridge",
                                  description="Run a Megatron-Bridge run folder written by write_run_folder.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, handler, help_text in [
        ("upload", upload, "copy our artifact files to the data root (fsspec; skips files already there)"),
        ("stage-in", stage_in, "on the cluster: copy the files the trainer opens from S3 into cache/"),
        ("train", train, "under torchrun: the recipe's ConfigContainer + overrides.yaml -> pretrain / finetune"),
        ("show", show, "print the plan: recipe, overrides, uploads and the commands"),
    ]:
        command = commands.add_parser(name, help=help_text, description=help_text)
        command.add_argument("run_folder", type=Path, help="a folder written by write_run_folder")
        command.set_defaults(handler=handler)
    return top


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if not (args.run_folder / "plan.json").is_file():
        raise NemotronError(f"{args.run_folder}/plan.json not found; pass a run folder written by write_run_folder")
    args.handler(args.run_folder)
