"""An evaluation run's opening and closing in one object, so that an evaluation step reads as its measurements.

Every evaluation step does the same bookkeeping around what it measures: refuse bad `--harness` /
`--benchmarks` flags before any work; load the checkpoint; start the clock once it has arrived (in a
pipe, loading waits for the previous step); find the artifacts it was made from; score each model
under the step's thread count, loading them one after the other; and at the end mark the output
folder unfinished, write samples.json, put `wall_seconds` in the metrics, log the numbers to the
lineage tracker and save the results artifact. `EvaluationRun` does that and nothing else: the data,
each model's measurements, the lesson and the changed answers stay in the step, on the page:

    evaluation = EvaluationRun(config, SFTCheckpoint)            # flags checked, checkpoint in, clock on
    dataset = evaluation.upstream(SFTDataset, "dataset", made_from=[evaluation.checkpoint])
    ...the held-out data...
    for name, model, tokenizer in evaluation.models(base=base, sft=evaluation.checkpoint):
        ...the measurements, per model...
    if evaluation.with_lm_eval:                                  # --harness lm_eval
        metrics["lm_eval"] = evaluation.lm_eval([task], {"base": base.model_dir, ...})
    metrics["lesson"] = lesson(...)                              # the lesson, the changed answers
    return evaluation.save(SFTResults, inputs=[...], samples=samples, metrics=metrics, **fields)

Torch-free at import (so a step's `--help` stays fast): the model stack is imported when used.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from nemotron import atomic
from nemotron.artifact import Artifact, mark_unfinished
from nemotron.artifact.upstream import load_upstream_input
from nemotron.cpu import evaluation_threads
from nemotron.evaluation.settings import EvaluationSettings, LMEvalSettings
from nemotron.trackers import get_lineage_tracker
from nemotron.training.artifacts import ModelCheckpoint

A = TypeVar("A", bound=Artifact)


class EvaluationRun:
    """The checkpoint, the clock, the models one at a time, lm-eval's files and the results artifact of one
    evaluation step."""

    def __init__(self, config: EvaluationSettings, checkpoint_type: type[ModelCheckpoint]) -> None:
        self.config = config
        self.lm_eval_tasks = None  # lm-eval's task index, with --harness lm_eval (nemotron.evaluation.harness)
        if isinstance(config, LMEvalSettings):
            from nemotron.evaluation.harness import check_harness_flags

            self.lm_eval_tasks = check_harness_flags(config.harness, config.benchmarks)  # before any work
        self.checkpoint = checkpoint_type.load_input(config, "checkpoint")
        self.started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
        self._lm_eval: dict[str, Any] = {"benchmarks": []}  # the artifact's lm-eval fields, once it has run

    def upstream(self, cls: type[A], name: str, made_from: Sequence[Artifact]) -> A:
        """The input `name` of the Config (`--<name>-path`, `--<name>-artifact`), else from stdin in a pipe,
        else the one `made_from` recorded (`nemotron.artifact.upstream.load_upstream_input`)."""
        return load_upstream_input(cls, self.config, name, made_from)

    @contextmanager
    def model(self, checkpoint: ModelCheckpoint) -> Iterator[tuple[Any, Any]]:
        """(model in float32 eval mode, tokenizer) of a checkpoint's Hugging Face folder
        (`nemotron.models.loading.load_model`), for a block run with the step's thread count
        (`nemotron.cpu.evaluation_threads`; the previous count comes back after it)."""
        from nemotron.models.loading import load_model

        with evaluation_threads(self.config.num_threads):
            yield load_model(checkpoint.model_dir)

    def models(self, **checkpoints: ModelCheckpoint) -> Iterator[tuple[str, Any, Any]]:
        """(name, model, tokenizer) of each checkpoint in turn, as `model` gives them: each is loaded when the
        loop reaches it, so the models are scored one after the other, not all loaded up front."""
        for name, checkpoint in checkpoints.items():
            with self.model(checkpoint) as (model, tokenizer):
                yield name, model, tokenizer

    @property
    def with_lm_eval(self) -> bool:
        """Whether `--harness lm_eval` asked for lm-evaluation-harness as well."""
        return self.lm_eval_tasks is not None

    def lm_eval(self, tasks: Sequence, models: dict[str, Path], *, max_length: int | None = None) -> dict:
        """lm-evaluation-harness on the step's held-out items (`tasks`, local tasks of
        `nemotron.evaluation.harness`) and on `--benchmarks`, for each model folder of `models`, under the
        step's thread count (`harness.evaluate_with_lm_eval`; its files go to the output folder). Returns
        lm-eval's numbers, `{model: {task: {metric: value}}}`, for `metrics["lm_eval"]`; `save` records the
        benchmarks run and the results file in the artifact."""
        from nemotron.evaluation.harness import evaluate_with_lm_eval

        with evaluation_threads(self.config.num_threads):
            numbers, benchmarks, results_path = evaluate_with_lm_eval(
                mark_unfinished(self.config.output_dir), self.lm_eval_tasks, tasks, models, self.config.benchmarks,
                batch_size=self.config.batch_size, max_length=max_length, limit=self.config.benchmark_limit,
            )
        self._lm_eval = {"benchmarks": benchmarks, "lm_eval_results": results_path}
        return numbers

    def save(self, results: type[A], *, inputs: Sequence[Artifact], metrics: dict, samples: list | None = None,
             **fields: Any) -> A:
        """Save the step's `results` artifact in its output folder, with `fields`.

        The folder is marked unfinished first (`mark_unfinished`), `samples` (if given) go to samples.json
        (`samples_path`), `metrics` get `wall_seconds` (the time since the checkpoint arrived) as their last
        entry, and their float values go to the lineage tracker as `eval/<name>` at the checkpoint's step.
        An lm-eval step's artifact also records the harness, the benchmarks run and lm-eval's results file.
        """
        out = mark_unfinished(self.config.output_dir)
        if samples is not None:
            atomic.write_text(out / "samples.json", json.dumps(samples, indent=2, ensure_ascii=False) + "\n")
            fields["samples_path"] = out / "samples.json"
        if isinstance(self.config, LMEvalSettings):
            fields |= {"harness": self.config.harness, **self._lm_eval}
        metrics["wall_seconds"] = time.perf_counter() - self.started
        get_lineage_tracker().log_metrics(
            {f"eval/{name}": value for name, value in metrics.items() if isinstance(value, float)},
            step=self.checkpoint.steps,
        )
        return results(
            path=out,
            config=asdict(self.config),
            scale=self.config.scale,
            seed=self.config.seed,
            inputs=list(inputs),
            metrics=metrics,
            **fields,
        ).save()
