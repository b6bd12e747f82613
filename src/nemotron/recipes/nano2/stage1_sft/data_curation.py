"""Stage 1, step 1: curate chat conversations into packed SFT data for the stage-0 model.

Supervised fine-tuning teaches a pretrained model the chat format: answer a user turn, then stop.
This step turns raw chats into exactly what the SFT trainer reads, and keeps the held-out questions
that stage-1 evaluation and stage-2 preference data need. It reads like stage 0's curation, in three
phases, and no process holds the corpus (docs/data-prep.md): the driver keeps hashes and counts.

1. setup: the stage-0 checkpoint and its tokenizer; the skill: seeded "which is the largest" problems,
   split into training and held-out ones, the training ones answered by an imperfect teacher (wrong in
   `--teacher-error-rate` of them: what SFT imitates, and stage 2 fixes); the chat sources as work items:
   those chats, the offline chatterbot corpus, `--extra-pool-path` JSONL pools and a post-training
   selection (`--selected-path`);
2. stages (`data_prep.stages`), two visible lists over those work items: signatures (per conversation,
   its validity, exact hash, question hash and split), then the driver's decisions from signatures alone
   (scale cap -> validation -> exact dedup -> the grouped split: no valid or test question is ever
   trained on); write: the decisions -> each split's conversations JSONL -> train and valid tokenized in
   the nano2 chat format (loss on assistant tokens and their `<|im_end|>` only) and packed into Parquet;
3. finalize: one file per split, counts from the receipts, an `SFTDataset`.
Each stage counts what it removes, per source and reason; a re-run re-uses every work item whose
receipt holds. A tokenizer without the chat markers or the nano2 template is refused.

Input: a stage-0 `PretrainCheckpoint` (its `model_dir` holds the tokenizer). Output: an `SFTDataset`
(tokenizer copy, packed train/valid Parquet, train/valid/test conversation JSONL, the skill's problems).

    python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny \\
        --checkpoint-path runs/nano2/stage0_pretrain/training
    python -m nemotron.recipes.nano2.stage0_pretrain.evaluation --scale tiny ... \\
        | python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from nemotron import atomic
from nemotron.artifact import ArtifactRef, apply_scale, mark_unfinished, source_ref
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.conversations import chatterbot_folder, check_chat_tokenizer
from nemotron.data_prep.pipeline import WORK_ITEM_BYTES
from nemotron.data_prep.progress import timed
from nemotron.data_prep.settings import SFTCurationSettings
from nemotron.data_prep.splits import SPLITS, check_ratios
from nemotron.data_prep.stages import ReadStage, TokenizeWriteStage, plan_stages, run_pending
from nemotron.data_prep.stages.conversations import (
    ConversationSignatureStage,
    check_splits_filled,
    join_split_files,
    packing_stats,
    plan_conversation_items,
    resolve_conversations,
)
from nemotron.data_prep.stages.dedup import DecisionStage
from nemotron.data_prep.stages.finalize import reader_counts, stage_counts
from nemotron.data_prep.stages.runner import StagePlan, remove_other_runs
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.data_prep.verifiable import largest_problems, split_problems, teacher_messages, write_problems
from nemotron.errors import NemotronError
from nemotron.models.loading import ModelLimits, check_fits
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset, SFTDataset

# "Full" reads up to a million conversations; apply_scale gives tiny 10,000 (all of chatterbot).
FULL_CONVERSATIONS = 1_000_000
# Skill problems per scale: 2,000 to train on at tiny (and 500 held out) sit beside chatterbot's ~700 chats.
SKILL_PROBLEMS = {"tiny": 2_500, "small": 5_000, "medium": 20_000, "full": 100_000}
# The skill's demonstrations are one chat source, read from this file; its conversations get its name as
# their category (the evaluation steps tell the skill's chats from the others by it).
SKILL_CHATS = "skill_chats.jsonl"
SKILL_CATEGORY = "skill_chats"
# Tokens per packed row: the stage-0 sequence length of each scale, so SFT never runs the model past
# the context it was pretrained on. At tiny, chatterbot chats are ~40 tokens (median), so a 256-token
# row holds about five of them with ~98% of its slots used, and short rows keep CPU attention cheap.
PACK_SIZES = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}


@dataclass
class Config(SFTCurationSettings):  # the stage-0 checkpoint or dataset, pack_size, workers, output_dir, scale
    """Curate chat conversations into packed SFT data (train/valid) and held-out test chats."""

    use_chatterbot: bool = True
    """Include the offline chatterbot corpus (~2,000 chats, 21 categories)."""
    skill_problems: int | None = None
    """"Which is the largest" problems made (a skill a program can check, `nemotron.data_prep.verifiable`),
    train and held out together; default per scale (tiny 2,500); 0 leaves the skill out."""
    skill_held_out: float = 0.2
    """Share of those problems held out (by the numbers asked) for evaluation; never trained on."""
    teacher_error_rate: float = 0.3
    """Share of the training problems the teacher answers with its one mistake, the second-largest number:
    SFT imitates it, and stage 2 (DPO on the model's own answers, judged by the checker) fixes it."""
    extra_pool_path: tuple[Path, ...] = ()
    """Extra JSONL pools of chats (OpenAI `messages` or ShareGPT `conversations` records, normalized by
    nemotron.data_prep.transforms; a record without an id is `<file>:<0-based line>`)."""
    selected_path: Path | None = None
    """Selected records of the post-training data pipeline (its selected.parquet); tool-using ones are skipped."""
    split_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Shares of train, valid and test (before questions are moved to a single split)."""
    overflow: Literal["truncate", "drop"] = "truncate"
    """What to do with a conversation longer than pack_size."""
    output_dir: Path = Path("runs/nano2/stage1_sft/data_curation")
    seed: int = 0
    """Seeds the split hash."""


def main(config: Config) -> SFTDataset:
    seconds: dict[str, float] = {}
    # --- setup: the stage-0 checkpoint and its tokenizer, the sources as work items ---
    limit = apply_scale(FULL_CONVERSATIONS, config.scale)  # also rejects an unknown scale
    pack_size = config.pack_size or PACK_SIZES[config.scale]
    ratios = check_ratios(config.split_ratios)
    if config.pretrain_dataset_path is not None:
        # At scale the stage-0 model is still to be trained on the cluster; its tokenizer is the one the
        # stage-0 data was made with. The model's context is checked when Megatron-Bridge builds it.
        checkpoint = PretrainDataset.load(path=config.pretrain_dataset_path, scale=config.scale,
                                          flag="--pretrain-dataset-path")
        tokenizer_dir = checkpoint.tokenizer_dir
    else:
        checkpoint = PretrainCheckpoint.load_input(config, "checkpoint")
        tokenizer_dir = checkpoint.model_dir
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    tokenizer = load_tokenizer(tokenizer_dir)
    check_chat_tokenizer(tokenizer, tokenizer_dir)
    if config.pretrain_dataset_path is None:
        limits = ModelLimits.from_folder(checkpoint.model_dir)
        check_fits(limits, where=str(checkpoint.model_dir), largest_id=len(tokenizer) - 1,
                   fix="the folder mixes a tokenizer and a model that do not belong together")
        check_fits(limits, where=str(checkpoint.model_dir), longest=pack_size,
                   fix=f"pass --pack-size {limits.context} or smaller")
    # --- the skill: seeded "which is the largest" problems (`nemotron.data_prep.verifiable.Largest`), split by
    # the numbers asked (skill_train.jsonl, skill_test.jsonl: true answers); the training ones answered by an
    # imperfect teacher that gives the second-largest number in --teacher-error-rate of them (skill_chats.jsonl),
    # then read like any chat source. The sources are checked before anything is written ---
    skill = skill_problems(config)
    entries, sources = chat_sources(config, skill_chats=config.output_dir / SKILL_CHATS if skill["train"] else None)
    out = mark_unfinished(config.output_dir)  # a failed re-run must not leave an artifact over mixed files
    write_skill(skill, out)
    blend = DataBlend.from_dict({"sources": entries}, where="chat sources")
    items, input_fingerprint = plan_conversation_items(blend, [ref.digest for ref in sources], WORK_ITEM_BYTES)

    # --- stages, pass 1: read -> signatures; the driver: scale cap, validation, dedup, grouped split ---
    with timed("signatures", seconds):
        signatures = plan_stages(items, input_fingerprint, [
            # chatterbot, JSONL pools, selected records -> conversations (records with tool calls are skipped;
            # what a reader cannot make a conversation of is counted per source and reason)
            ReadStage(mode="conversation"),
            # per conversation: its validation verdict (known roles, non-blank turns, user first, assistant
            # last), exact-dedup hash, question hash, and split by a seeded hash of its id
            ConversationSignatureStage(ratios, config.seed),
        ], out / "curation")
        run_here(signatures, config)
    # The driver, from signatures alone (`stages.conversations.resolve_conversations`): scale cap (the first
    # 10,000 read at tiny, all of chatterbot) -> validation (rejects counted by reason) -> exact dedup
    # (chatterbot repeats many Q/A pairs verbatim: more than half of it goes) -> the grouped split: every
    # question (normalized first user message) that landed in several splits moves wholly into one, so no
    # valid or test question is ever trained on (`splits.repair_groups`; moves counted).
    with timed("resolve", seconds):
        resolution = resolve_conversations(signatures, out / "curation" / "decisions", limit=limit)
        check_splits_filled(resolution, config.split_ratios)

    # --- stages, pass 2: read -> decisions -> conversations JSONL (all splits) -> packed Parquet ---
    save_tokenizer(tokenizer, out / "tokenizer")  # the dataset's own copy; the writers ship it, not the model
    packing = {"pack_size": pack_size, "overflow": config.overflow, "seed": config.seed, "chat_template": "nano2"}
    with timed("write", seconds):
        splits = plan_stages(items, input_fingerprint, [
            ReadStage(mode="conversation"),
            DecisionStage(resolution),  # drops by the decisions (counted per reason), gives each its split
            TokenizeWriteStage("jsonl", None, record="chat", pass_on=True, name="conversations"),
            # train and valid in the nano2 chat format (loss on assistant tokens and their <|im_end|> only), packed
            # first-fit-decreasing (Krell et al., 2021) per work item (a source file, or 64 MB of one): at tiny
            # chatterbot is one item, so the bytes are those of packing the split whole
            TokenizeWriteStage("packed_parquet", out / "tokenizer", packing, record="chat", splits=("train", "valid")),
        ], out / "splits")
        run_here(splits, config)

    # --- finalize: each split's per-item files joined in plan order into the one file per split that the SFT
    # trainer and the Megatron-Bridge hand-off read; counts from the receipts; the artifact ---
    with timed("finalize", seconds):
        for split in SPLITS:
            join_split_files(splits, split, ".jsonl", out / f"{split}_conversations.jsonl")
        packed = {split: join_split_files(splits, split, ".parquet", out / f"{split}_packed.parquet")
                  for split in ("train", "valid")}
        counts = stage_counts(splits)
        stats = {split: packing_stats(path, counts, f"write/{split}/", pack_size) for split, path in packed.items()}
        remove_other_runs([signatures, splits])
    read = reader_counts(signatures)
    return SFTDataset(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[checkpoint, *sources],
        tokenizer_dir=out / "tokenizer",
        train_packed=out / "train_packed.parquet",
        valid_packed=out / "valid_packed.parquet",
        train_conversations=out / "train_conversations.jsonl",
        valid_conversations=out / "valid_conversations.jsonl",
        test_conversations=out / "test_conversations.jsonl",
        train_problems=out / "skill_train.jsonl",
        test_problems=out / "skill_test.jsonl",
        pack_size=pack_size,
        num_train_conversations=counts.get("conversations/train/written", 0),
        num_valid_conversations=counts.get("conversations/valid/written", 0),
        num_test_conversations=counts.get("conversations/test/written", 0),
        num_train_rows=stats["train"].rows,
        vocab_size=len(tokenizer),
        metrics={
            "skill_train_problems": len(skill["train"]),
            "skill_test_problems": len(skill["test"]),
            "teacher_mistakes": skill["mistakes"],
            "teacher_error_share": skill["mistakes"] / max(1, len(skill["train"])),
            "conversations_read": {name: c["read"] for name, c in read.items()},
            "source_skipped": {name: c["skipped"] for name, c in read.items()},
            "scale_limit_dropped": resolution.scale_limit_dropped,
            "rejected_by_reason": resolution.rejected_by_reason,
            "rejected_total": sum(resolution.rejected_by_reason.values()),
            "exact_duplicates": resolution.exact_duplicates,
            **resolution.split.as_metrics(),
            "train_packing": stats["train"].as_metrics(),
            "valid_packing": stats["valid"].as_metrics(),
            "packing_utilisation": stats["train"].utilisation,
            "overflow_truncated": stats["train"].truncated + stats["valid"].truncated,
            "overflow_dropped": stats["train"].dropped + stats["valid"].dropped,
            "train_loss_tokens": stats["train"].loss_tokens,
            "seconds_by_phase": seconds,
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


def skill_problems(config: Config) -> dict:
    """The skill's problems, split into "train" and "test", and the teacher's demonstrations of the training
    ones ("demonstrations": (messages, mistake or None) each), made from the seed; nothing is written."""
    count = SKILL_PROBLEMS[config.scale] if config.skill_problems is None else config.skill_problems
    if count < 0:
        raise NemotronError(f"--skill-problems {count}: give a number of problems, or 0 to leave the skill out")
    train, test = split_problems(largest_problems(count, config.seed), config.skill_held_out, config.seed) \
        if count else ([], [])
    demonstrations = [teacher_messages(p, config.teacher_error_rate, config.seed) for p in train]
    return {"train": train, "test": test, "demonstrations": demonstrations,
            "mistakes": sum(mistake is not None for _, mistake in demonstrations)}


def write_skill(skill: dict, out: Path) -> None:
    """The problems with their true answers (`skill_train.jsonl`, `skill_test.jsonl`) and the teacher's
    demonstrations of the training ones (`skill_chats.jsonl`, the chat source SFT reads)."""
    write_problems(skill["train"], out / "skill_train.jsonl")
    write_problems(skill["test"], out / "skill_test.jsonl")
    atomic.write_text(out / SKILL_CHATS, "".join(json.dumps({"id": f"largest/{i}", "messages": messages}) + "\n"
                                                        for i, (messages, _) in enumerate(skill["demonstrations"])))


def chat_sources(config: Config, skill_chats: Path | None = None) -> tuple[list[dict], list[ArtifactRef]]:
    """The chat sources as blend entries (one each, in the order they are gathered) and their lineage, checked
    before anything is written. The skill's chats (written next, by this step, from its seed) are a source
    but no input of the lineage."""
    entries, sources = [], []
    if skill_chats is not None:
        entries.append({"path": str(skill_chats.resolve()), "name": "largest"})
    if config.use_chatterbot:
        entries.append({"path": "chatterbot", "name": "chatterbot"})
        sources.append(source_ref(chatterbot_folder()))
    for path in config.extra_pool_path:
        if not Path(path).is_file():
            raise NemotronError(f"JSONL file not found: {path}; check the path")
        entries.append({"path": str(Path(path).resolve()), "name": Path(path).name})
        sources.append(source_ref(path))
    if config.selected_path is not None:
        if not Path(config.selected_path).exists():
            raise NemotronError(f"{config.selected_path}: no selected records (Parquet); pass the selected.parquet "
                                "of the post-training pipeline's embed_select or score step")
        entries.append({"path": str(Path(config.selected_path).resolve()), "name": "selected"})
        sources.append(source_ref(config.selected_path))
    if not entries:
        raise NemotronError("no chat sources: keep --use-chatterbot or --skill-problems, or pass --extra-pool-path "
                            "FILE.jsonl or --selected-path")
    return entries, sources


def run_here(plan: StagePlan, config: Config) -> dict[str, str]:
    """Work items in this process at tiny (a spawned worker imports for ~2 s), else a pool of --workers."""
    return run_pending(plan, "local", config.workers or (1 if config.scale == "tiny" else None))


def save_tokenizer(tokenizer, folder: Path) -> None:
    """Save the tokenizer so the dataset is self-contained; the folder appears atomically."""
    with atomic.output_folder(folder) as staging:
        tokenizer.save_pretrained(str(staging))


if __name__ == "__main__":
    run(main)
