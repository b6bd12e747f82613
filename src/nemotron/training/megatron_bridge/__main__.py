"""`python -m nemotron.training.megatron_bridge upload|stage-in|train|show RUN_FOLDER` (see cli.py)."""

from nemotron.cli import one_line_errors
from nemotron.training.megatron_bridge.cli import main

if __name__ == "__main__":
    with one_line_errors():
        main()
