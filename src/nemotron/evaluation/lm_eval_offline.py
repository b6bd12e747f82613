"""lm-evaluation-harness, imported offline: what `harness` and `benchmarks` both run lm-eval through.

`import_lm_eval()` sets HF_HUB_OFFLINE and HF_DATASETS_OFFLINE before lm-eval and datasets load (nothing
is downloaded: models and data come from local folders) and returns lm-eval's `simple_evaluate` and
`TaskManager`; if lm-eval is not installed, one line says how to install it.
"""

from __future__ import annotations

import os

from nemotron.errors import NemotronError

LM_EVAL_VERSION = "0.4.13"
INSTALL = f"install it with pip install -e '.[harness]' (or pip install 'lm-eval[hf]=={LM_EVAL_VERSION}')"


def import_lm_eval():
    """lm-eval's evaluator and task manager, offline; one line says how to install lm-eval if it is missing."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: models and data come from local folders
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:
        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager
    except ImportError as error:
        raise NemotronError(f"--harness lm_eval needs lm-evaluation-harness ({error}); {INSTALL}") from None
    return simple_evaluate, TaskManager
