"""Stage 1, step 1: conversations with reasoning traces for a task a program can check, plus chat data.

1. setup: the stage-0 checkpoint's tokenizer (it carries the nano3 chat template, stage-0 curation put
   it there), the problem count per scale.
2. sources: seeded addition problems in several wordings (`nemotron.data_prep.verifiable`), split by the
   numbers asked into train and held out (never trained on: evaluation and RL use them); the training
   ones worked column by column by an imperfect teacher that drops one carry in `--teacher-error-rate`
   of them (SFT learns the habit, RL's checker fixes it), with reasoning stripped from
   `--reasoning-off-share` of them, as Nano 3 strips it from 10% of its SFT samples, so the model learns
   both sides of the on/off switch. Beside them, with `--chat-data`, nano2's chat data, and the
   post-training selection, if given (`--selected-path`, `--selected-artifact`, or a DiverseSelection on
   stdin beside the checkpoint).
3. stages (the list in `main`, run over work items with receipts; no process holds every conversation):
   read -> the selection's records in the nano3 template -> valid or train by a hash of each
   conversation's id -> the nano3 chat template with exact loss masks (reasoning tokens trained or not,
   `--train-reasoning`), packed per work item.
4. finalize: one packed file per split, what Megatron-Bridge reads (`train.parquet`, `valid.parquet`),
   and a `Nano3SFTDataset` with the counts from the receipts.

Input: the stage-0 MoE `Nano3PretrainCheckpoint` (`--checkpoint-path`, or stdin); at scale, where the
stage-0 model is still to be trained on the cluster, as in nano2 the stage-0 PretrainDataset
(`--pretrain-dataset-path`: its tokenizer is the one Megatron-Bridge trains the model with). Output: a
`Nano3SFTDataset`. Refuses the dense counterpart's checkpoint and a tokenizer without the nano3 chat
template. torch-free (the tokenizer comes from `transformers`, imported when used).

    python -m nemotron.recipes.nano3.stage1_sft.data_curation --checkpoint-path runs/nano3/stage0_pretrain/training
    python -m nemotron.recipes.nano3.stage1_sft.data_curation --checkpoint-path runs/nano3/stage0_pretrain/training \\
        --selected-path runs/post_training_data/embed_select
    python -m nemotron.recipes.nano3.stage1_sft.data_curation --scale full \\
        --pretrain-dataset-path runs/nano3/stage0_pretrain/data_curation
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from nemotron import atomic
from nemotron.artifact import ArtifactRef, apply_scale, mark_unfinished, read_stdin_artifacts, source_ref
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.chat.nano3 import NANO3_CHAT_TEMPLATE
from nemotron.data_prep.packing import concat_packed_parquet
from nemotron.data_prep.pipeline import WORK_ITEM_BYTES
from nemotron.data_prep.settings import SFTCurationSettings
from nemotron.data_prep.stages import (
    FilterSplitStage,
    ReadStage,
    RecordsToChatStage,
    TokenizeWriteStage,
    plan_stages,
    plan_work_items,
    run_pending,
)
from nemotron.data_prep.stages.finalize import finalize, reader_counts
from nemotron.data_prep.verifiable import addition_problems, split_problems, teacher_messages, write_problems
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import Nano3PretrainCheckpoint, Nano3SFTDataset, PretrainDataset
from nemotron.recipes.post_training_data.artifacts import DiverseSelection

# Problems at full scale; apply_scale gives tiny 1,000, small 10,000. Operand digits per scale: there are
# only 8,100 distinct two-digit sums, so the larger scales (which ask for more problems) use longer ones.
FULL_PROBLEMS = 100_000
DIGITS = {"tiny": 2, "small": 3, "medium": 3, "full": 4}
PACK_SIZE = {"tiny": 256, "small": 512, "medium": 1024, "full": 4096}


@dataclass
class Config(SFTCurationSettings):  # the stage-0 checkpoint or dataset, pack_size, workers, output_dir, scale
    """Worked addition problems (reasoning on and off) and chat data, in the nano3 format, packed."""

    checkpoint_path: Path | None = None
    """The stage-0 MoE Nano3PretrainCheckpoint (its tokenizer); default: read it from stdin."""
    num_problems: int | None = None
    """Addition problems made, train and held out together; default per scale (tiny 1,000)."""
    digits: int | None = None
    """Digits per operand; default per scale (tiny 2, small and medium 3, full 4)."""
    held_out: float = 0.2
    """Share of the problems held out (by question) for evaluation and RL."""
    teacher_error_rate: float = 0.2
    """Chance that the teacher drops one carry in a training problem's demonstration; problems without a carry
    are always right, so about one demonstration in six is wrong (metrics.teacher_error_share: 0.14-0.17 in
    seeds 0-2). Chosen with SFT's passes: training.py's EPOCHS has the exact match this gave at tiny in each seed
    (and what 0.35 gave), and RL still about halves the share of sampled answers that drop a carry."""
    reasoning_off_share: float = 0.1
    """Share of the training problems whose reasoning is stripped (Nano 3: 10%), teaching the off switch."""
    train_reasoning: bool = True
    """Reasoning tokens are loss targets (False: the model reads them in context but is not trained on them)."""
    chat_data: bool = False
    """Add nano2's chat data (chatterbot, ~2,000 conversations). Off by default at tiny, measured: with it,
    300 SFT steps left held-out exact match at 0.00 (on) / 0.01 (off); without it, 0.16 / 0.04."""
    selected_path: Path | None = None
    """Post-training records to train on: a DiverseSelection folder (the pipeline's embed_select) or a
    selected.parquet file; each keeps its reasoning, tool calls and `loss_mode`."""
    selected_artifact: str | None = None
    """Or a tracked reference such as `diverseselection:latest`."""
    valid_share: float = 0.05
    """Share of the training conversations kept for the validation loss (by a hash of each one's id)."""
    output_dir: Path = Path("runs/nano3/stage1_sft/data_curation")
    """Where the tokenizer, packed Parquet and problem files are written."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the number of problems and the pack size."""
    executor: Literal["local", "ray"] = "local"
    """Where the stages run: local (this process, or a pool of --workers processes) or ray (each work item
    a Ray task; RAY_ADDRESS names a cluster, else a local Ray starts). Same bytes either way."""
    seed: int = 0
    """Seeds the problems, the held-out split, which problems lose their reasoning, and the packing."""


def main(config: Config) -> Nano3SFTDataset:
    from nemotron.data_prep.tokenizer import load_tokenizer

    # --- setup ---
    if config.pretrain_dataset_path is not None:  # at scale: the tokenizer the cluster's model will have
        base = PretrainDataset.load(path=config.pretrain_dataset_path, scale=config.scale,
                                    flag="--pretrain-dataset-path")
        tokenizer_dir = base.tokenizer_dir
    else:
        base = Nano3PretrainCheckpoint.load_input(config, "checkpoint")
        if base.dense:
            raise NemotronError(f"{base.path} is the dense counterpart; stage 1 fine-tunes the MoE model: pass "
                                "runs/.../stage0_pretrain/training, not training_dense")
        tokenizer_dir = base.model_dir
    started = time.perf_counter()
    tokenizer = load_tokenizer(tokenizer_dir)
    if tokenizer.chat_template != NANO3_CHAT_TEMPLATE:
        raise NemotronError(f"{tokenizer_dir}: the tokenizer does not carry the nano3 chat template; re-run stage-0 "
                            "data curation with --chat-template nano3 (the nano3 recipe does)")
    pack_size = config.pack_size or PACK_SIZE[config.scale]
    num_problems = config.num_problems or apply_scale(FULL_PROBLEMS, config.scale)
    if not 0 <= config.reasoning_off_share <= 1 or not 0 < config.valid_share < 1:
        raise NemotronError("--reasoning-off-share must be in [0, 1] and --valid-share in (0, 1)")
    if config.workers is not None and config.workers < 1:
        raise NemotronError(f"--workers must be >= 1, got {config.workers}")
    selection = _selection(config)

    # --- sources: the problems (made from the seed, written as problem_chats.jsonl, then read like any file),
    # chat data, the selection ---
    out = mark_unfinished(config.output_dir)
    digits = config.digits or DIGITS[config.scale]
    train, test = split_problems(addition_problems(num_problems, config.seed, digits), config.held_out, config.seed)
    rng = random.Random(config.seed)
    reasoning_off = set(rng.sample(range(len(train)), round(len(train) * config.reasoning_off_share)))
    write_problems(train, out / "problems_train.jsonl")  # the true answers: what RL and evaluation check
    write_problems(test, out / "problems_test.jsonl")
    # The demonstrations SFT imitates come from an imperfect teacher: a dropped carry in a share of its
    # worked answers (verifiable.teacher_messages); the model learns them, mistakes included, and RL fixes them.
    demonstrations = [teacher_messages(p, config.teacher_error_rate, config.seed, with_reasoning=i not in reasoning_off)
                      for i, p in enumerate(train)]
    atomic.write_text(out / "problem_chats.jsonl", "".join(
        json.dumps({"id": f"problem-{i:06d}", "messages": messages}) + "\n"
        for i, (messages, _) in enumerate(demonstrations)))
    mistakes = sum(mistake is not None for _, mistake in demonstrations)
    tokenizer.save_pretrained(out / "tokenizer")  # the tokenizer alone travels to the workers, not the model
    blend = DataBlend.from_dict({"sources": [
        {"path": "problem_chats.jsonl", "name": "problems"},
        *([{"path": "chatterbot"}] if config.chat_data else []),  # no reasoning: `<think></think>`, then the answer
        *([{"path": str(_selected_file(selection)), "name": "selected"}] if selection is not None else []),
    ], "split": [1 - config.valid_share, config.valid_share, 0.0]}, base_dir=out)

    # --- stages: read -> records in the nano3 template -> valid by id -> tokenize, mask and pack per item ---
    items, input_fingerprint = plan_work_items(blend, WORK_ITEM_BYTES)  # the driver reads no conversation
    options = {"pack_size": pack_size, "chat_template": "nano3", "seed": config.seed,
               "train_reasoning": config.train_reasoning}
    plan = plan_stages(items, input_fingerprint, [
        ReadStage(mode="chat"),
        # the selection's records in the nano3 template with their reasoning and tool calls, masked by their own
        # `loss_mode` (nemotron.data_prep.chat.records); those it cannot express counted by reason (selected_skipped)
        RecordsToChatStage("nano3", sources=("selected",)),
        FilterSplitStage(blend.split),  # a hash of each conversation's id: valid or train, decided alone
        TokenizeWriteStage("packed_parquet", out / "tokenizer", options, record="chat"),  # nemotron.data_prep.packing
    ], out / "runs")
    run_pending(plan, config.executor, config.workers or (1 if config.scale == "tiny" else None))
    splits, counts = finalize(plan, blend, "packed_parquet")

    # --- finalize: one packed file per split (what Megatron-Bridge reads), the counts ---
    for split in ("train", "valid"):
        if split not in splits:
            raise NemotronError(f"no conversation landed in {split} ({counts}); raise --num-problems or move "
                                "--valid-share away from 0 and 1")
        concat_packed_parquet(splits[split].paths, out / f"{split}.parquet")
    chats = reader_counts(plan).get("chatterbot", {}).get("read", 0)
    loss_modes = {key.removeprefix("records/loss mode: "): n for key, n in counts.items()
                  if key.startswith("records/loss mode: ")}
    skipped = {key.removeprefix("records/skipped: "): n for key, n in counts.items()
               if key.startswith("records/skipped: ")}
    packed = {split: splits[split].totals for split in ("train", "valid")}
    print(f"data_curation: {len(train)} train problems ({len(reasoning_off)} without reasoning, {mistakes} with the "
          f"teacher's dropped carry), {len(test)} held "
          f"out, {chats} chats, {sum(loss_modes.values())} selected records ({sum(skipped.values())} the template "
          f"cannot express); {packed['train']['rows']} packed rows", file=sys.stderr)
    metrics = {"train_problems": len(train), "reasoning_off_problems": len(reasoning_off), "test_problems": len(test),
               "teacher_mistakes": mistakes, "teacher_error_share": mistakes / len(train),
               "chat_conversations": chats, "selected_records": sum(loss_modes.values()),
               "selected_loss_modes": dict(sorted(loss_modes.items())),
               "selected_skipped": dict(sorted(skipped.items())),
               "valid_conversations": packed["valid"]["conversations"], "valid_rows": packed["valid"]["rows"],
               **{f"train_{k}": v for k, v in packed["train"].items()},
               "train_utilisation": packed["train"]["tokens"] / (packed["train"]["rows"] * pack_size),
               "run_hash": plan.run_hash, "wall_seconds": time.perf_counter() - started}
    return Nano3SFTDataset(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed,
        inputs=[base] + ([selection] if selection is not None else []),
        tokenizer_dir=out / "tokenizer", train_packed=out / "train.parquet", valid_packed=out / "valid.parquet",
        train_problems=out / "problems_train.jsonl", test_problems=out / "problems_test.jsonl", pack_size=pack_size,
        num_train_conversations=packed["train"]["conversations"], num_test_problems=len(test),
        train_reasoning=config.train_reasoning, vocab_size=len(tokenizer), metrics=metrics,
    ).save()


def _selection(config: Config) -> DiverseSelection | ArtifactRef | None:
    """The selection input: a DiverseSelection (path, tracked reference, or on stdin beside a piped
    checkpoint), a source reference to a bare Parquet file, or None when no selection is given."""
    path = config.selected_path
    if path is not None and Path(path).is_file():
        return source_ref(Path(path))
    piped = config.checkpoint_path is None and config.checkpoint_artifact is None and \
        config.pretrain_dataset_path is None and DiverseSelection.type_name() in read_stdin_artifacts()
    if path is None and config.selected_artifact is None and not piped:
        return None
    return DiverseSelection.load(path=path, tracked_artifact=config.selected_artifact, scale=config.scale,
                                 flag="--selected-path")


def _selected_file(selection: DiverseSelection | ArtifactRef) -> Path:
    return Path(selection.selected_path if isinstance(selection, DiverseSelection) else selection.path)


if __name__ == "__main__":
    run(main)
