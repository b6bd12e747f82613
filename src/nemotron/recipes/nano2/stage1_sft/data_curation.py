"""Stage 1, step 1: curate chat conversations into packed SFT data for the stage-0 model.

Supervised fine-tuning teaches a pretrained model the chat format: answer a user turn, then stop.
This step turns raw chats into exactly what the SFT trainer reads, and keeps the held-out questions
that stage-1 evaluation and stage-2 preference data need. In order:

1. Gather conversations: the offline chatterbot corpus (~2,000 chats, 21 categories) plus any extra
   JSONL pools (`--extra-pool-path a.jsonl b.jsonl`, OpenAI `messages` or ShareGPT `conversations`
   format, normalized by `nemotron.data_prep.transforms`), and a post-training selection
   (`--selected-path selected.parquet`, records with tool calls counted and skipped). Scale caps how
   many are read (tiny: 10,000, which covers chatterbot whole; for this corpus scale governs steps and
   model size, not data).
2. Validate (known roles, non-blank turns, user first, assistant last) and exact-dedup; chatterbot
   repeats many Q/A pairs verbatim, so dedup removes more than half of it. Rejects are counted by reason.
3. Split train/valid/test by a seeded hash of each conversation id, then move every question (the
   normalized first user message) that landed in several splits wholly into one, so no valid or test
   question is ever trained on (`nemotron.data_prep.splits`; the moves are counted in metrics).
4. Tokenize with the stage-0 tokenizer in the nano2 chat format (ChatML-like) with a loss mask that
   covers assistant tokens and their `<|im_end|>` only (`nemotron.data_prep.chat.nano2`). A
   tokenizer without the chat markers or the nano2 template is refused.
5. Pack train and valid into packed Parquet (first-fit-decreasing; Krell et al., 2021), the format
   Megatron-Bridge reads (`nemotron.data_prep.packing`). Test stays as conversations for evaluation.

Input: a stage-0 `PretrainCheckpoint` (its `model_dir` holds the tokenizer). Output: an `SFTDataset`
(tokenizer copy, packed train/valid Parquet, train/valid/test conversation JSONL).

    python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny \\
        --checkpoint-path runs/nano2/stage0_pretrain/training
    python -m nemotron.recipes.nano2.stage0_pretrain.evaluation --scale tiny ... \\
        | python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from tqdm import tqdm

from nemotron import atomic
from nemotron.artifact import apply_scale, mark_unfinished, source_ref
from nemotron.cli import run
from nemotron.data_prep.chat.nano2 import tokenize_conversation
from nemotron.data_prep.chat.records import selected_conversations
from nemotron.data_prep.conversations import (
    chatterbot_folder,
    chatterbot_pool,
    check_chat_tokenizer,
    dedup_conversations,
    filter_conversations,
    load_chat_pool,
    question_key,
    write_conversations,
)
from nemotron.data_prep.packing import PackingConfig, pack_to_parquet
from nemotron.data_prep.splits import SPLITS, split_grouped
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.errors import NemotronError
from nemotron.models.loading import ModelLimits, check_fits
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset, SFTDataset

# "Full" reads up to a million conversations; apply_scale gives tiny 10,000 (all of chatterbot).
FULL_CONVERSATIONS = 1_000_000
# Tokens per packed row: the stage-0 sequence length of each scale, so SFT never runs the model past
# the context it was pretrained on. At tiny, chatterbot chats are ~40 tokens (median), so a 256-token
# row holds about five of them with ~98% of its slots used, and short rows keep CPU attention cheap.
PACK_SIZES = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}


@dataclass
class Config:
    """Curate chat conversations into packed SFT data (train/valid) and held-out test chats."""

    checkpoint_path: Path | None = None
    """A stage-0 PretrainCheckpoint folder; default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `pretraincheckpoint:latest`."""
    pretrain_dataset_path: Path | None = None
    """Instead of a checkpoint, at scale: the stage-0 PretrainDataset, whose tokenizer the model will have
    (the SFT data is made before Megatron-Bridge has trained the stage-0 model)."""
    use_chatterbot: bool = True
    """Include the offline chatterbot corpus."""
    extra_pool_path: tuple[Path, ...] = ()
    """Extra JSONL pools of chats (OpenAI `messages` or ShareGPT `conversations` records)."""
    selected_path: Path | None = None
    """Selected records of the post-training data pipeline (its selected.parquet); tool-using ones are skipped."""
    split_ratios: tuple[float, float, float] = (0.8, 0.1, 0.1)
    """Shares of train, valid and test (before questions are moved to a single split)."""
    pack_size: int | None = None
    """Tokens per packed row; default per scale (tiny 256)."""
    overflow: Literal["truncate", "drop"] = "truncate"
    """What to do with a conversation longer than pack_size."""
    output_dir: Path = Path("runs/nano2/stage1_sft/data_curation")
    """Where the step writes its artifact and files (a training step keeps its checkpoints here too)."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds the split hash."""




def main(config: Config) -> SFTDataset:
    # --- setup: the stage-0 checkpoint and its tokenizer ---
    pack_size = config.pack_size or PACK_SIZES[config.scale]
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

    # --- data: gather the pools ---
    pools, source_skipped, sources = [], {}, []
    if config.use_chatterbot:
        pool, source_skipped["chatterbot"] = chatterbot_pool()
        pools.append(("chatterbot", pool))
        sources.append(source_ref(chatterbot_folder()))
    for path in config.extra_pool_path:
        pool, source_skipped[path.name] = load_chat_pool(path)
        pools.append((path.name, pool))
        sources.append(source_ref(path))
    if config.selected_path is not None:
        pool, source_skipped["selected"] = selected_conversations(config.selected_path)
        pools.append(("selected", pool))
        sources.append(source_ref(config.selected_path))
    if not pools:
        raise NemotronError("no chat sources: keep --use-chatterbot or pass --extra-pool-path FILE.jsonl "
                            "or --selected-path")
    gathered = [conversation for _, pool in pools for conversation in pool]
    conversations = gathered[: apply_scale(FULL_CONVERSATIONS, config.scale)]
    scale_limit_dropped = len(gathered) - len(conversations)

    # --- curation: validate, dedup, split without question leaks ---
    conversations, rejects = filter_conversations(conversations)
    conversations, duplicates = dedup_conversations(conversations)
    splits, split_report = split_grouped(
        conversations, id_of=lambda c: c["id"], group_of=question_key, ratios=config.split_ratios, seed=config.seed
    )
    for split in SPLITS:
        if not splits[split]:
            raise NemotronError(
                f"the {split} split is empty ({len(conversations)} conversations after curation, ratios "
                f"{list(config.split_ratios)}); add data or raise its share in --split-ratios"
            )

    # --- tokenize and pack ---
    out = mark_unfinished(config.output_dir)  # a failed re-run must not leave an artifact over mixed files
    packing = PackingConfig(pack_size=pack_size, overflow=config.overflow, seed=config.seed)
    packed_stats = {}
    for split in ("train", "valid"):
        tokenized = [
            tokenize_conversation(tokenizer, c["messages"], "assistant", conversation_id=c["id"])
            for c in tqdm(splits[split], desc=f"tokenizing {split}", unit="chat", file=sys.stderr, delay=2.0)
        ]
        packed_stats[split] = pack_to_parquet(tokenized, out / f"{split}_packed.parquet", packing, show_progress=False)

    # --- write ---
    for split in SPLITS:
        write_conversations(splits[split], out / f"{split}_conversations.jsonl")
    save_tokenizer(tokenizer, out / "tokenizer")
    train_stats = packed_stats["train"]
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
        pack_size=pack_size,
        num_train_conversations=len(splits["train"]),
        num_valid_conversations=len(splits["valid"]),
        num_test_conversations=len(splits["test"]),
        num_train_rows=train_stats.rows,
        vocab_size=len(tokenizer),
        metrics={
            "conversations_read": {name: len(pool) for name, pool in pools},
            "source_skipped": {name: dict(sorted(counts.items())) for name, counts in source_skipped.items()},
            "scale_limit_dropped": scale_limit_dropped,
            "rejected_by_reason": dict(sorted(rejects.items())),
            "rejected_total": sum(rejects.values()),
            "exact_duplicates": duplicates,
            **split_report.as_metrics(),
            "train_packing": train_stats.as_metrics(),
            "valid_packing": packed_stats["valid"].as_metrics(),
            "packing_utilisation": train_stats.utilisation,
            "overflow_truncated": train_stats.truncated + packed_stats["valid"].truncated,
            "overflow_dropped": train_stats.dropped + packed_stats["valid"].dropped,
            "train_loss_tokens": train_stats.loss_tokens,
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


def save_tokenizer(tokenizer, folder: Path) -> None:
    """Save the tokenizer so the dataset is self-contained; the folder appears atomically."""
    with atomic.output_folder(folder) as staging:
        tokenizer.save_pretrained(str(staging))


if __name__ == "__main__":
    run(main)
