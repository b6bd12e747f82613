"""`python -m nemotron.training.megatron_bridge upload|stage-in|train|show RUN_FOLDER` (see cli.py)."""

import sys

from nemotron.errors import NemotronError
from nemotron.training.megatron_bridge.cli import main

if __name__ == "__main__":
    try:
        main()
    except NemotronError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)
