"""Stage 2, step 1: build the preference pairs that DPO aligns the SFT model with.

Direct Preference Optimization (Rafailov et al., 2023) needs, for each prompt, a preferred ("chosen")
and a dispreferred ("rejected") answer. This step makes them from the stage-1 conversations, so the
whole recipe stays offline and reproducible:

- chosen: the reference assistant answer, i.e. the last turn of a conversation; the prompt is
  everything before it (`prompt` is a message list, rendered later with the nano2 chat template);
- rejected: a plausible wrong answer, drawn per pair with a seeded RNG and recorded in
  `rejected_kind`: another conversation's answer from the same category ("other_answer", never an
  answer given to the same question), or the chosen answer corrupted ("shuffled" words, "truncated").
  See `nemotron.data_prep.preference` for the rules.

Training pairs come from the TRAIN conversations only. Held-out pairs are built the same way from the
TEST conversations, in their own file, for stage-2 evaluation (preference accuracy, reward margins);
stage 1 already guarantees that no test question appears in train, and this step re-checks it for
the training pairs it writes. Instead of building training pairs you can give your own preference
JSONL with `--pairs-path` (same shape; TRL's conversational shape is accepted): a record with an
empty chosen or rejected answer is refused with one error line naming the file and line.

Then, as every curation step, it prepares exactly what training consumes: the pairs tokenized in the
nano2 chat format with the SFT tokenizer (prompt ending in the generation prompt, each answer ending
in `<|im_end|>`), pairs longer than `--max-length` tokens (prompt + the longer answer) dropped and
counted (never cut: a cut chosen answer can look like a "truncated" rejected one), and a seeded
`--validation-share` of the rest held out for DPO's validation loss (`nemotron.data_prep.preference`).

Each train conversation yields one pair per rejected kind it admits (`--train-pairs-per-conversation 3`,
the default; held-out pairs stay one per test conversation, the same whatever this is). Measured at tiny
(seed 0, the same SFT model and held-out pairs): 1 pair per conversation gives held-out preference
accuracy 0.708 after DPO, 3 give 0.730, all of it on truncated answers (0.93 -> 1.00); the
other-answer kind stays at chance either way (see the recipe README).

Scale: every train conversation yields a pair at tiny (~700); scale caps the pair count at larger
scales (tiny 10,000) and sets the maximum length; otherwise it governs DPO steps and model size.

Input: an `SFTDataset` (stdin, `--dataset-path` or `--dataset-artifact`). Output: a
`PreferenceDataset`: train/valid/test pairs (canonical JSONL, text) and the train/valid pairs
tokenized (`*_tokens.jsonl`).

    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny \\
        --dataset-path runs/nano2/stage1_sft/data_curation
    python -m nemotron.recipes.nano2.stage1_sft.data_curation --scale tiny --checkpoint-path CKPT \\
        | python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron.artifact import apply_scale, mark_unfinished, source_ref
from nemotron.cli import run
from nemotron.data_prep.conversations import question_key, read_conversations
from nemotron.data_prep.preference import (
    build_pairs,
    read_pairs,
    split_pairs,
    tokenize_pairs,
    write_pairs,
    write_tokenized_pairs,
)
from nemotron.data_prep.settings import CurationSettings
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.data_prep.transforms import write_jsonl
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PreferenceDataset, SFTDataset

FULL_PAIRS = 1_000_000  # "full" trains on up to a million pairs; tiny: 10,000 (all of ours)
# The longest pair trained on (prompt + the longer answer, in tokens); tiny skips ~9% of chatterbot's.
MAX_LENGTH = {"tiny": 128, "small": 256, "medium": 1024, "full": 4096}


@dataclass
class Config(CurationSettings):  # output_dir, scale, seed (nemotron.data_prep.settings)
    """Build DPO preference pairs (train from train conversations, held-out from test)."""

    dataset_path: Path | None = None
    """A stage-1 SFTDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest`."""
    pairs_path: Path | None = None
    """Your own training pairs (JSONL: prompt, chosen, rejected) instead of building them."""
    other_answer_share: float = 0.5
    """Share of pairs whose rejected answer is another answer of the same category (the rest are
    corruptions of the chosen answer)."""
    train_pairs_per_conversation: int = 3
    """Training pairs per train conversation, one per rejected kind (1-3); held-out pairs stay one per
    conversation (the same pairs whatever this is)."""
    max_length: int | None = None
    """Drop training pairs longer than this (prompt + longer answer, tokens); default per scale (tiny 128)."""
    validation_share: float = 0.05
    """Share of the training pairs held out (seeded) for DPO's validation loss; 0 disables it."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/data_curation")
    seed: int = 0
    """Seeds the choice of each rejected answer and the validation slice."""




def main(config: Config) -> PreferenceDataset:
    # --- setup ---
    sft = SFTDataset.load_input(config, "dataset")
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    train_conversations = read_conversations(sft.train_conversations)
    test_conversations = read_conversations(sft.test_conversations)
    inputs = [sft]

    # --- training pairs: built from train conversations, or the user's ---
    if config.pairs_path is not None:
        train_pairs = read_pairs(config.pairs_path)
        inputs.append(source_ref(config.pairs_path))
    else:
        train_pairs = build_pairs(
            train_conversations, config.seed, config.other_answer_share, config.train_pairs_per_conversation
        )
    conversation_ids = {c["id"] for c in train_conversations}
    built = sum(pair["id"] in conversation_ids for pair in train_pairs)  # conversations with a pair (the first)
    limit = apply_scale(FULL_PAIRS, config.scale)
    scale_limit_dropped = max(0, len(train_pairs) - limit)
    train_pairs = train_pairs[:limit]

    # A held-out question in the training pairs would inflate held-out preference accuracy.
    test_questions = {question_key(c) for c in test_conversations}
    leaking = [p for p in train_pairs if question_key({"messages": p["prompt"]}) in test_questions]
    train_pairs = [p for p in train_pairs if question_key({"messages": p["prompt"]}) not in test_questions]
    if not train_pairs:
        raise NemotronError(
            f"no training pairs left ({len(leaking)} removed because their question is a test question); "
            "give pairs for other questions or rebuild the SFT dataset"
        )

    # --- held-out pairs: built the same way from test conversations ---
    test_pairs = build_pairs(test_conversations, config.seed, config.other_answer_share)

    # --- tokenize the training pairs; drop the too long ones; hold out a validation slice ---
    tokenizer = load_tokenizer(sft.tokenizer_dir)
    tokens = tokenize_pairs(tokenizer, train_pairs)
    max_length = config.max_length or MAX_LENGTH[config.scale]
    train_ids, valid_ids = split_pairs(tokens, max_length, config.validation_share, config.seed)
    if not train_ids:
        raise NemotronError(
            f"none of the {len(train_pairs)} training pairs fits in --max-length {max_length} tokens "
            "(prompt + longer answer); raise --max-length"
        )

    # --- write ---
    out = mark_unfinished(config.output_dir)  # a failed re-run must not leave an artifact over mixed files
    write_pairs([train_pairs[i] for i in train_ids], out / "train_pairs.jsonl")
    write_jsonl([train_pairs[i] for i in valid_ids], out / "valid_pairs.jsonl")
    write_pairs(test_pairs, out / "test_pairs.jsonl")
    write_tokenized_pairs(train_pairs, tokens, train_ids, out / "train_tokens.jsonl")
    write_tokenized_pairs(train_pairs, tokens, valid_ids, out / "valid_tokens.jsonl")
    trained = [train_pairs[i] for i in train_ids]
    return PreferenceDataset(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=inputs,
        tokenizer_dir=sft.tokenizer_dir,
        train_pairs=out / "train_pairs.jsonl",
        valid_pairs=out / "valid_pairs.jsonl",
        test_pairs=out / "test_pairs.jsonl",
        train_tokens=out / "train_tokens.jsonl",
        valid_tokens=out / "valid_tokens.jsonl",
        max_length=max_length,
        num_train_pairs=len(train_ids),
        num_valid_pairs=len(valid_ids),
        num_test_pairs=len(test_pairs),
        metrics={
            "train_pairs_source": "given" if config.pairs_path else "built",
            "train_rejected_kinds": count_kinds(trained),
            "test_rejected_kinds": count_kinds(test_pairs),
            # conversations whose answer admits no rejected one (one word, alone in its category)
            "train_conversations_without_pair": 0 if config.pairs_path else len(train_conversations) - built,
            "test_conversations_without_pair": len(test_conversations) - len(test_pairs),
            "train_pairs_removed_test_question": len(leaking),
            "scale_limit_dropped": scale_limit_dropped,
            "pairs_skipped_too_long": len(train_pairs) - len(train_ids) - len(valid_ids),
            "num_train_pairs": len(train_ids),
            "num_valid_pairs": len(valid_ids),
            "num_test_pairs": len(test_pairs),
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


def count_kinds(pairs: list[dict]) -> dict[str, int]:
    """{rejected_kind: number of pairs}, sorted by kind."""
    return dict(sorted(Counter(pair["rejected_kind"] for pair in pairs).items()))


if __name__ == "__main__":
    run(main)
