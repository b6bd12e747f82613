"""Stage 2, step 1: preference pairs from the SFT model's own answers, judged by a checker.

Direct Preference Optimization (Rafailov et al., 2023) needs, for each prompt, a preferred ("chosen") and a
dispreferred ("rejected") answer. Real alignment data is judged samples: the model being aligned answers
each prompt several times and a judge ranks the answers (Nemotron's alignment data is built that way, so the
pairs are about the mistakes THIS model makes). Here the judge is a program, the skill's checker:

1. setup: the `SFTCheckpoint` to align, and through its lineage the `SFTDataset` with the skill's training
   and held-out problems ("Which is the largest: 3, 8, 5?", `nemotron.data_prep.verifiable`);
2. sample: `--samples-per-prompt` answers to each of the first `--num-prompts` training problems from the
   SFT model, at temperature 1 (seeded): SFT imitated a teacher that is sometimes wrong, and it shows;
3. judge: the checker checks each answer; a problem with a right AND a wrong answer gives one pair, the
   others (all right or all wrong: nothing for DPO to learn) are counted;
4. held-out pairs: each held-out problem's true answer against the teacher's mistake, for evaluation;
5. like every curation step, what training consumes: the pairs tokenized in the nano2 chat format, those
   longer than `--max-length` dropped and counted, a seeded `--validation-share` held out for validation.

Instead of sampling you can give your own preference JSONL with `--pairs-path` (same shape; TRL's
conversational shape is accepted); a record with an empty chosen or rejected answer is refused with one
error line naming the file and line. This step runs the model (torch, imported in `main`) because
on-policy pairs are the model's answers; it writes data only.

Input: an `SFTCheckpoint` (stdin or `--checkpoint-path`); its `SFTDataset` from the lineage (or
`--dataset-path`). Output: a `PreferenceDataset`.

    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny \\
        --checkpoint-path runs/nano2/stage1_sft/training
    python -m nemotron.recipes.nano2.stage1_sft.training --scale tiny --dataset-path SFT_DATA \\
        | python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron.artifact import apply_scale, mark_unfinished, source_ref
from nemotron.artifact.fields import execution
from nemotron.artifact.upstream import load_upstream_input
from nemotron.cli import run
from nemotron.data_prep.preference import (
    judged_pairs,
    read_pairs,
    reference_pairs,
    split_pairs,
    tokenize_pairs,
    write_pairs,
    write_tokenized_pairs,
)
from nemotron.data_prep.settings import CurationSettings
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.data_prep.transforms import write_jsonl
from nemotron.data_prep.verifiable import SKILL_ANSWER_TOKENS, is_right, read_problems
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PreferenceDataset, SFTCheckpoint, SFTDataset

# Prompts sampled at full scale; apply_scale gives tiny 600 (of the 2,000 training problems). At tiny, 4
# answers each from the SFT model leave ~75% of the prompts with a right and a wrong answer: ~450 pairs.
FULL_PROMPTS = 60_000
# The longest pair trained on (prompt + the longer answer, in tokens).
MAX_LENGTH = {"tiny": 128, "small": 256, "medium": 1024, "full": 4096}


@dataclass
class Config(CurationSettings):  # output_dir, scale, seed (nemotron.data_prep.settings)
    """Preference pairs from the SFT model's own answers to the skill's training problems, judged by the checker."""

    checkpoint_path: Path | None = None
    """The stage-1 SFTCheckpoint whose answers are judged; default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `sftcheckpoint:latest`."""
    dataset_path: Path | None = None
    """The SFTDataset with the skill's problems; default: stdin, else the checkpoint's lineage."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `sftdataset:latest`."""
    pairs_path: Path | None = None
    """Your own training pairs (JSONL: prompt, chosen, rejected) instead of sampling and judging."""
    num_prompts: int | None = None
    """Training problems the SFT model answers; default per scale (tiny 600)."""
    samples_per_prompt: int = 4
    """Answers sampled per problem (more: more problems with both a right and a wrong answer)."""
    temperature: float = 1.0
    """Sampling temperature: 1 samples the model's own distribution, mistakes included."""
    max_length: int | None = None
    """Drop training pairs longer than this (prompt + longer answer, tokens); default per scale (tiny 128)."""
    validation_share: float = 0.05
    """Share of the training pairs held out (seeded) for DPO's validation loss; 0 disables it."""
    num_threads: int | None = execution(None)
    """torch threads for the sampling; default: the cores this process may use."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/data_curation")
    seed: int = 0
    """Seeds the sampling and the validation slice."""

    @property
    def piped(self) -> bool:
        """The checkpoint came down the pipe (so its dataset may have too)."""
        return self.checkpoint_path is None and self.checkpoint_artifact is None


def main(config: Config) -> PreferenceDataset:
    # --- setup: the SFT model and its dataset's problems ---
    if config.samples_per_prompt < 2 or not config.temperature > 0:
        raise NemotronError(f"--samples-per-prompt {config.samples_per_prompt} / --temperature {config.temperature}: "
                            "a pair needs at least 2 answers per problem, sampled at a temperature above 0")
    checkpoint = SFTCheckpoint.load_input(config, "checkpoint")
    started = time.perf_counter()  # after the input: in a pipe, loading waits for the previous step
    sft = load_upstream_input(SFTDataset, config, "dataset", made_from=[checkpoint])
    tokenizer = load_tokenizer(sft.tokenizer_dir)
    held_out = read_problems(sft.test_problems)
    inputs, counts = [checkpoint, sft], {}

    # --- training pairs: the SFT model's answers judged by the checker, or the user's own pairs ---
    # 2. sample: SFT imitated a teacher that answers the second-largest number in a share of its
    # demonstrations (stage-1 curation's --teacher-error-rate), so some of its samples are that near miss.
    # 3. judge: `verifiable.is_right` checks each answer; `preference.judged_pairs` makes a problem with a right
    # and a wrong answer one pair (chosen the first right one, rejected a wrong one, its kind recorded: the
    # teacher's near miss, another number, or no single number) and counts the problems answered all right or
    # all wrong.
    if config.pairs_path is not None:
        train_pairs = read_pairs(config.pairs_path)
        inputs.append(source_ref(config.pairs_path))
    else:
        problems = read_problems(sft.train_problems, apply_scale(FULL_PROMPTS, config.scale)
                                 if config.num_prompts is None else config.num_prompts)
        if not problems:
            raise NemotronError(f"{sft.train_problems} holds no skill problems; re-run stage-1 curation with "
                                "--skill-problems above 0, or give --pairs-path")
        answers = sample_answers(checkpoint.model_dir, tokenizer, problems, config)
        train_pairs, counts = judged_pairs(problems, answers, is_right)
        if not train_pairs:
            raise NemotronError(f"none of the {len(problems)} problems got both a right and a wrong answer from "
                                f"{checkpoint.model_dir} ({dict(counts)}); raise --samples-per-prompt or give "
                                "--pairs-path")
    # A held-out question in the training pairs would inflate the held-out measures.
    held_out_questions = {p["question"] for p in held_out}
    leaking = sum(pair["prompt"][-1]["content"] in held_out_questions for pair in train_pairs)
    train_pairs = [pair for pair in train_pairs if pair["prompt"][-1]["content"] not in held_out_questions]

    # --- 5. tokenize the training pairs; drop the too long ones; hold out a validation slice ---
    # In the nano2 chat format with the SFT tokenizer: the prompt ends in the generation prompt, each answer in
    # `<|im_end|>` (`nemotron.data_prep.preference`); the validation slice is for DPO's validation loss.
    tokens = tokenize_pairs(tokenizer, train_pairs)
    max_length = config.max_length or MAX_LENGTH[config.scale]
    train_ids, valid_ids = split_pairs(tokens, max_length, config.validation_share, config.seed)
    if not train_ids:
        raise NemotronError(f"none of the {len(train_pairs)} training pairs fits in --max-length {max_length} "
                            "tokens (prompt + longer answer); raise --max-length")

    # --- write: the pairs (text), the tokenized ones, the held-out pairs ---
    out = mark_unfinished(config.output_dir)  # a failed re-run must not leave an artifact over mixed files
    # 4. held-out pairs (`preference.reference_pairs`): for stage-2 evaluation's preference accuracy
    test_pairs = reference_pairs(held_out)
    write_pairs([train_pairs[i] for i in train_ids], out / "train_pairs.jsonl")
    write_jsonl([train_pairs[i] for i in valid_ids], out / "valid_pairs.jsonl")
    write_pairs(test_pairs, out / "test_pairs.jsonl")
    write_tokenized_pairs(train_pairs, tokens, train_ids, out / "train_tokens.jsonl")
    write_tokenized_pairs(train_pairs, tokens, valid_ids, out / "valid_tokens.jsonl")
    return PreferenceDataset(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=inputs,
        tokenizer_dir=sft.tokenizer_dir, train_pairs=out / "train_pairs.jsonl", valid_pairs=out / "valid_pairs.jsonl",
        test_pairs=out / "test_pairs.jsonl", train_tokens=out / "train_tokens.jsonl",
        valid_tokens=out / "valid_tokens.jsonl", max_length=max_length, num_train_pairs=len(train_ids),
        num_valid_pairs=len(valid_ids), num_test_pairs=len(test_pairs),
        metrics={
            "train_pairs_source": "given" if config.pairs_path else "judged samples",
            # per problem sampled: a pair, by the kind of its rejected answer, or none (all right / all wrong)
            "judged": dict(sorted(counts.items())),
            "train_pairs_removed_held_out_question": leaking,
            "pairs_skipped_too_long": len(train_pairs) - len(train_ids) - len(valid_ids),
            "num_train_pairs": len(train_ids),
            "num_valid_pairs": len(valid_ids),
            "num_test_pairs": len(test_pairs),
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


def sample_answers(model_dir: Path, tokenizer, problems: list[dict], config: Config) -> list[list[str]]:
    """`config.samples_per_prompt` answers per problem from the model, as text (the chat-formatted question,
    temperature `config.temperature`, seeded by `config.seed` per batch of prompts)."""
    from nemotron.cpu import evaluation_threads
    from nemotron.data_prep.chat.nano2 import tokenize_prompt
    from nemotron.data_prep.tokenizer import IM_END_ID
    from nemotron.models.loading import load_model
    from nemotron.training.grpo import sample_groups

    k, batch, answers = config.samples_per_prompt, 128, []
    with evaluation_threads(config.num_threads):
        model, _ = load_model(model_dir)
        prompts = [tokenize_prompt(tokenizer, [{"role": "user", "content": p["question"]}]) for p in problems]
        for start in range(0, len(prompts), batch):
            ids = sample_groups(model, prompts[start : start + batch], k, SKILL_ANSWER_TOKENS, config.temperature,
                                IM_END_ID, tokenizer.pad_token_id, seed=config.seed + start)
            texts = [tokenizer.decode([t for t in row if t != IM_END_ID]).strip() for row in ids]
            answers += [texts[i : i + k] for i in range(0, len(texts), k)]
    return answers


if __name__ == "__main__":
    run(main)
