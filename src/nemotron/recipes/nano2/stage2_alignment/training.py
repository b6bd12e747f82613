"""Stage 2, step 2: align the SFT model with Direct Preference Optimization (DPO).

DPO (Rafailov et al., 2023, "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model") trains a policy pi, initialised from the SFT model, to prefer the chosen answer y_w over the
rejected answer y_l of each pair, relative to a frozen reference pi_ref (the SFT model itself):

    loss = -log sigmoid(beta * [(log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))])

No reward model and no sampling: the loss needs only the summed log-probabilities of the two given
answers (`nemotron.evaluation.preference`). `--loss-variant conservative --label-smoothing 0.1` is
cDPO (Mitchell, 2023); `--loss-variant ipo` is IPO (Azar et al., 2023).

The reference never changes, so its log-probabilities are computed ONCE, in one pass of the frozen
SFT model over the pairs before the first step, and stored in `output_dir/reference_logps.pt` with
the run's checkpoints (a resumed run reads it back). A step is then one policy forward + backward over
the chosen and rejected answers (one concatenated batch, as TRL's `concatenated_forward`), not that
plus two reference forwards: ~1.9x the cost of an SFT step on the same batch instead of ~2.5x
(benchmarks/bench_dpo_vs_sft.py). At tiny the one-time pass costs about a quarter of the training loop.

Inputs: a `PreferenceDataset` (`--dataset-path`, `--dataset-artifact`, or stdin) and the stage-1
`SFTCheckpoint` to align (`--checkpoint-path`, `--checkpoint-artifact`, or stdin). Output: a
`DPOCheckpoint` (`model/` loads with AutoModelForCausalLM and AutoTokenizer alone, `metrics.jsonl`,
`checkpoints/step_*` and `reference_logps.pt` for resume).

    python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny \\
        --dataset-path runs/nano2/stage2_alignment/data_curation --checkpoint-path runs/nano2/stage1_sft/training
    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny --dataset-path SFT_DATA \\
        | python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny --checkpoint-path SFT_CKPT
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage2_alignment.training --dataset-path ...

Supports:
- metrics per step in metrics.jsonl, as TRL's DPOTrainer logs them: loss, reward accuracy and margin
  (implicit rewards beta * log(pi / pi_ref)), the policy's log-probs of chosen and rejected, lr,
  grad_norm; and every `--eval-every` steps the same on a seeded held-out slice of the training pairs;
- AdamW, linear warmup + cosine decay, gradient clipping, gradient accumulation (nemotron.training);
- resume after a kill: re-run the same command with the same output folder; it continues from the last
  checkpoint and ends with the same weights and loss as an uninterrupted run (bitwise on CPU);
- DDP under torchrun (Gloo on CPU, NCCL on GPU): each rank trains on its slice of every global batch;
  rank 0 computes the reference log-probs and the others read them; `--precision bf16` autocast.
Pairs longer than `--max-length` tokens (prompt + longer answer) are skipped and counted, not cut:
cutting a chosen answer can make it look like a "truncated" rejected one.

Refuses, before training starts: a pair file with an empty chosen or rejected answer (file and line
named); an SFT checkpoint of another scale; a checkpoint whose tokenizer differs from the dataset's
(ids would mean other tokens); loss settings DPO does not define (label smoothing without the
conservative variant, beta <= 0); resuming an output folder that holds a run with other settings or
inputs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import Field
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForCausalLM

from nemotron.artifact import METADATA, Artifact, ArtifactPath
from nemotron.cli import run
from nemotron.data_prep.conversations import check_chat_tokenizer
from nemotron.data_prep.preference import read_pairs
from nemotron.data_prep.tokenizer import check_same_vocabulary, load_tokenizer
from nemotron.errors import NemotronError
from nemotron.evaluation.chat import tokenize_pairs
from nemotron.evaluation.inputs import load_model
from nemotron.evaluation.preference import completion_logprobs, dpo_loss, pair_logprobs, reward_metrics
from nemotron.recipes.nano2.stage1_sft.training import SFTCheckpoint
from nemotron.recipes.nano2.stage2_alignment.data_curation import PreferenceDataset
from nemotron.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from nemotron.training.distributed import (
    all_reduce_mean,
    barrier,
    cleanup,
    seed_everything,
    setup_distributed,
    torch_threads,
)
from nemotron.training.metrics import MetricsLog, TrainingProgress
from nemotron.training.optim import build_optimizer, warmup_cosine
from nemotron.training.packed_batches import PackedBatches
from nemotron.training.run_folder import check_same_run, run_settings, save_model_folder

# Optimizer steps per scale. Tiny: 3/4 of an epoch over the ~630 chatterbot training pairs, ~30 s on one core.
STEPS = {"tiny": 60, "small": 1000, "medium": 3000, "full": 10000}
# The longest pair trained on (prompt + the longer answer, in tokens); tiny skips ~9% of chatterbot's.
MAX_LENGTH = {"tiny": 128, "small": 256, "medium": 1024, "full": 4096}
REFERENCE_LOGPS = "reference_logps.pt"
STEP_METRICS = ("loss", "reward_accuracy", "reward_margin", "logps_chosen", "logps_rejected")


@dataclass
class Config:
    """DPO of the SFT model on preference pairs, against the frozen SFT model as the reference."""

    dataset_path: Path | None = None
    """A PreferenceDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `preferencedataset:latest`."""
    checkpoint_path: Path | None = None
    """The stage-1 SFTCheckpoint folder (policy start and frozen reference); default: stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `sftcheckpoint:latest`."""
    beta: float = 0.1
    """Strength of the pull towards the reference: the implicit reward is beta * log(pi / pi_ref)."""
    loss_variant: Literal["sigmoid", "conservative", "ipo"] = "sigmoid"
    """sigmoid: DPO; conservative: cDPO (needs --label-smoothing); ipo: IPO's squared loss."""
    label_smoothing: float = 0.0
    """cDPO's assumed probability that a preference label is flipped (0 < eps < 0.5)."""
    steps: int | None = None
    """Optimizer steps; default per scale (tiny 60)."""
    micro_batch_size: int = 8
    """Pairs per forward pass (per process); each pair is two sequences."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; global batch = micro_batch_size x grad_accum_steps x processes."""
    max_length: int | None = None
    """Skip pairs longer than this (prompt + longer answer, tokens); default per scale (tiny 128)."""
    lr: float = 2e-4
    """Peak learning rate: a fifth of SFT's; DPO should re-rank answers, not re-learn the language. At
    tiny, 1e-4 barely moves held-out preference accuracy and 5e-4 overfits the training pairs."""
    min_lr_ratio: float = 0.1
    warmup_steps: int | None = None
    """Linear warmup; default 10% of the steps."""
    weight_decay: float = 0.0
    """No decay, as in the DPO paper and TRL: the KL-like pull to the reference already regularises."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    validation_share: float = 0.05
    """Share of the training pairs held out (seeded) for the validation DPO loss; 0 disables it."""
    reference_batch_size: int = 32
    """Sequences per forward pass of the one-time reference pass and of validation."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """bf16 autocast for forward passes (weights and optimizer stay fp32)."""
    eval_every: int = 20
    checkpoint_every: int = 20
    keep_last: int = 2
    num_threads: int | None = None
    """torch threads per process; default 1 at tiny (tiny matmuls do not gain from more), else torch's."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/training")
    scale: str = "tiny"
    seed: int = 0
    """Seeds the validation slice and the order of pairs."""


class DPOCheckpoint(Artifact):
    model_dir: ArtifactPath  # final Hugging Face folder: weights + config + tokenizer (with chat template)
    metrics_path: ArtifactPath  # metrics.jsonl: step, loss, rewards, log-probs, lr, grad_norm (no wall-clock)
    training_loss: float  # final smoothed DPO loss
    validation_loss: float | None  # DPO loss on the held-out slice of the training pairs
    steps: int = Field(gt=0)


def main(config: Config) -> DPOCheckpoint:
    # --- compute init ---
    info = setup_distributed()
    seed_everything(config.seed)
    torch.set_num_threads(torch_threads(config.scale, config.num_threads))
    if not info.is_main:
        sys.stdout = open(os.devnull, "w")  # one artifact JSON on stdout per job, from rank 0
    zero = torch.zeros(1)
    dpo_loss(zero, zero, zero, zero, config.beta, config.loss_variant, config.label_smoothing)  # refuses bad settings

    # --- inputs: the pairs and the SFT model, checked against each other ---
    dataset = PreferenceDataset.load(path=config.dataset_path, reference=config.dataset_artifact, scale=config.scale)
    sft = SFTCheckpoint.load(path=config.checkpoint_path, reference=config.checkpoint_artifact, scale=config.scale)
    started = time.perf_counter()  # after the inputs: in a pipe, loading waits for the previous step
    tokenizer, sft_tokenizer = load_tokenizer(dataset.tokenizer_dir), load_tokenizer(sft.model_dir)
    check_chat_tokenizer(sft_tokenizer, sft.model_dir)
    check_chat_tokenizer(tokenizer, dataset.tokenizer_dir)
    check_same_vocabulary(sft_tokenizer, tokenizer, f"checkpoint {sft.model_dir}", f"dataset {dataset.path}")
    pairs = read_pairs(dataset.train_pairs)

    # --- model: the policy starts as the SFT model ---
    model = AutoModelForCausalLM.from_pretrained(sft.model_dir, dtype=torch.float32, local_files_only=True)
    model.to(info.device).train()
    ddp = DistributedDataParallel(model) if info.is_distributed else None
    forward = ddp or model
    autocast = torch.autocast(info.device.type, dtype=torch.bfloat16, enabled=config.precision == "bf16")

    # --- optimizer + schedule ---
    steps = config.steps or STEPS[config.scale]
    warmup = steps // 10 if config.warmup_steps is None else config.warmup_steps
    optimizer = build_optimizer(model, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = warmup_cosine(optimizer, warmup, steps, config.min_lr_ratio)

    # --- data: tokenized pairs, a seeded validation slice, the rest in seeded shuffled batches ---
    tokens = tokenize_pairs(tokenizer, pairs)  # (prompts, chosen, rejected), as evaluation scores them
    max_length = config.max_length or MAX_LENGTH[config.scale]
    train_ids, valid_ids = split_pairs(tokens, max_length, config.validation_share, config.seed)
    global_batch = config.micro_batch_size * config.grad_accum_steps * info.world_size
    if len(train_ids) < global_batch:
        raise NemotronError(
            f"{dataset.train_pairs}: {len(train_ids)} training pairs fit in --max-length {max_length}, fewer than "
            f"one global batch of {global_batch}; add pairs, raise --max-length or lower the batch settings"
        )
    # PackedBatches only indexes what it is given: here pair ids, one "row" per pair.
    batches = PackedBatches(
        train_ids, config.micro_batch_size, config.grad_accum_steps, config.seed, info.rank, info.world_size
    )

    # --- resume: the newest checkpoint of this output folder, if any ---
    out = config.output_dir
    run_identity = {"config": run_settings(config), "inputs": [dataset.digest, sft.digest]}
    start_step, ema, validation = 0, 0.0, None
    if (latest := latest_checkpoint(out)) is not None:
        state = load_checkpoint(latest, model, optimizer, scheduler)
        check_same_run(state["extra"]["run"], run_identity, latest)
        batches.load_state_dict(state["data_state"])
        start_step, ema, validation = state["step"], state["extra"]["ema"], state["extra"]["validation"]
    log = None
    if info.is_main:
        (out / METADATA).unlink(missing_ok=True)  # until this run completes, the folder holds no artifact
        log = MetricsLog(out / "metrics.jsonl", resume_step=start_step if latest else None)

    # --- reference log-probs: the frozen SFT model, one pass over the pairs, stored with the run ---
    # The reference term of the DPO loss is a constant per pair (Rafailov et al., 2023, eq. 7), so
    # every later step and every resume reads it instead of running a second model.
    reference_started = time.perf_counter()
    if info.is_main and stored_reference(out, run_identity) is None:
        with autocast:
            scored = sorted(train_ids + valid_ids)  # pairs skipped as too long are never needed
            save_reference(out, run_identity, sft.model_dir, tokens, scored, config.reference_batch_size)
    barrier()
    reference_chosen, reference_rejected = stored_reference(out, run_identity)
    reference_seconds = time.perf_counter() - reference_started

    # --- training loop ---
    progress = TrainingProgress(steps, start_step, "dpo") if info.is_main else None
    loop_started, loop_tokens = time.perf_counter(), 0
    for step in range(start_step + 1, steps + 1):
        micro_batches = batches.next_step()
        logps = {"chosen": [], "rejected": []}
        step_loss, step_tokens = torch.zeros(()), 0
        for index, ids in enumerate(micro_batches):
            last = index == len(micro_batches) - 1
            prompts, chosen, rejected = ([sequences[i] for i in ids] for sequences in tokens)
            with (ddp.no_sync() if ddp and not last else contextlib.nullcontext()), autocast:
                # Both answers of every pair in one forward: [chosen of each pair..., rejected of each pair...]
                policy = completion_logprobs(forward, prompts * 2, chosen + rejected, batch_size=2 * len(ids))
                policy_chosen, policy_rejected = policy[: len(ids)], policy[len(ids) :]
                loss, _, _ = dpo_loss(
                    policy_chosen, policy_rejected, reference_chosen[ids], reference_rejected[ids],
                    config.beta, config.loss_variant, config.label_smoothing,
                )
            (loss / len(micro_batches)).backward()  # equal-size micro-batches: the mean over the step's pairs
            step_loss += loss.detach() / len(micro_batches)
            logps["chosen"].append(policy_chosen.detach())
            logps["rejected"].append(policy_rejected.detach())
            step_tokens += sum(2 * len(p) + len(c) + len(r) for p, c, r in zip(prompts, chosen, rejected))
        clip = config.grad_clip if config.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the step's numbers over all ranks, a debiased moving average of the loss.
        step_ids = [i for ids in micro_batches for i in ids]
        record = step_metrics(step_loss, logps, reference_chosen[step_ids], reference_rejected[step_ids], config.beta)
        ema = 0.9 * ema + 0.1 * record["loss"]
        record |= {"smoothed_loss": ema / (1 - 0.9**step), "lr": lr, "grad_norm": grad_norm.item()}
        step_tokens = round(all_reduce_mean(torch.tensor(float(step_tokens))).item() * info.world_size)
        loop_tokens += step_tokens
        if valid_ids and (step % config.eval_every == 0 or step == steps) and info.is_main:
            # Rank 0 only, on the unwrapped model: no collective inside, the other ranks simply wait at
            # the next gradient all-reduce.
            with autocast:
                reference = (reference_chosen, reference_rejected)
                validation = validation_metrics(model, valid_ids, tokens, reference, config)
            record |= validation
        if info.is_main:
            log.log(step, record)
            progress.update(1, step_tokens, record["smoothed_loss"])
        if step % config.checkpoint_every == 0 or step == steps:
            if info.is_main:
                extra = {"run": run_identity, "ema": ema, "validation": validation}
                save_checkpoint(out, step, model, optimizer, scheduler, batches.state_dict(), extra,
                                tokenizer=tokenizer, keep_last=config.keep_last)
            barrier()
    loop_seconds = time.perf_counter() - loop_started
    if progress:
        progress.close()

    # --- final save: the model folder and the artifact (rank 0) ---
    artifact = None
    if info.is_main:
        save_model_folder(model, tokenizer, out / "model")
        final = log.records()[-1]
        validation = validation or {}
        artifact = DPOCheckpoint(
            path=out,
            config=asdict(config),
            scale=config.scale,
            seed=config.seed,
            inputs=[dataset, sft],
            model_dir=out / "model",
            metrics_path=out / "metrics.jsonl",
            training_loss=final["smoothed_loss"],
            validation_loss=validation.get("val_loss"),
            steps=steps,
            metrics={
                "training_loss": final["smoothed_loss"],
                **validation,
                "train_pairs": len(train_ids),
                "validation_pairs": len(valid_ids),
                "pairs_skipped_too_long": len(pairs) - len(train_ids) - len(valid_ids),
                "tokens_per_second": loop_tokens / loop_seconds if loop_tokens else None,
                "seconds_per_step": loop_seconds / (steps - start_step) if steps > start_step else None,
                "reference_seconds": reference_seconds,  # the one-time reference pass (~0 when resumed)
                "resumed_from_step": start_step,
                "world_size": info.world_size,
                "num_threads": torch.get_num_threads(),
                "wall_seconds": time.perf_counter() - started,
            },
        ).save()
    barrier()
    cleanup()
    return artifact or DPOCheckpoint.from_path(out)


def split_pairs(tokens: tuple, max_length: int, validation_share: float, seed: int) -> tuple[list[int], list[int]]:
    """(train ids, validation ids) of the pairs that fit in `max_length`; the split is seeded."""
    if not 0 <= validation_share < 1:
        raise NemotronError(f"--validation-share {validation_share} must be in [0, 1); 0.05 holds out 5%")
    lengths = [len(p) + max(len(c), len(r)) for p, c, r in zip(*tokens)]
    fitting = [i for i, length in enumerate(lengths) if length <= max_length]
    order = np.random.default_rng(seed).permutation(len(fitting))  # batches draw from (seed, epoch) streams
    held_out = round(validation_share * len(fitting))
    return sorted(fitting[i] for i in order[held_out:]), sorted(fitting[i] for i in order[:held_out])


def stored_reference(out: Path, run_identity: dict) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (chosen, rejected) reference log-probs stored for this very run, or None."""
    path = out / REFERENCE_LOGPS
    if not path.is_file():
        return None
    stored = torch.load(path, map_location="cpu", weights_only=True)
    return (stored["chosen"], stored["rejected"]) if stored["run"] == run_identity else None


def save_reference(
    out: Path, run_identity: dict, sft_model_dir: Path, tokens: tuple, ids: list[int], batch_size: int
) -> None:
    """Score pairs `ids` with the frozen SFT model (eval mode, no gradients); store the result atomically.

    Stored per pair of the file; a skipped (too long) pair gets NaN, so any use of it would show.
    """
    reference, _ = load_model(sft_model_dir)
    scored = pair_logprobs(reference, *([sequences[i] for i in ids] for sequences in tokens), batch_size=batch_size)
    chosen, rejected = (torch.full((len(tokens[0]),), float("nan")) for _ in range(2))
    chosen[ids], rejected[ids] = scored
    out.mkdir(parents=True, exist_ok=True)
    descriptor, temp = tempfile.mkstemp(dir=out, prefix=f".{REFERENCE_LOGPS}.", suffix=".tmp")
    os.close(descriptor)
    try:
        torch.save({"run": run_identity, "chosen": chosen, "rejected": rejected}, temp)
        os.replace(temp, out / REFERENCE_LOGPS)
    finally:
        Path(temp).unlink(missing_ok=True)


def step_metrics(loss: torch.Tensor, logps: dict, reference_chosen, reference_rejected, beta: float) -> dict:
    """The step's loss, reward accuracy and margin, and mean policy log-probs, averaged over all ranks."""
    chosen, rejected = torch.cat(logps["chosen"]).float(), torch.cat(logps["rejected"]).float()
    rewards = reward_metrics(chosen, rejected, reference_chosen, reference_rejected, beta)
    numbers = [loss.item(), rewards["reward_accuracy"], rewards["reward_margin"], chosen.mean(), rejected.mean()]
    local = torch.tensor([float(number) for number in numbers], dtype=torch.float64)
    return dict(zip(STEP_METRICS, all_reduce_mean(local).tolist()))


def validation_metrics(model, valid_ids: list[int], tokens: tuple, reference: tuple, config: Config) -> dict:
    """DPO loss, reward accuracy and margin on the held-out slice of the training pairs (eval mode)."""
    prompts, chosen, rejected = ([sequences[i] for i in valid_ids] for sequences in tokens)
    policy = pair_logprobs(model, prompts, chosen, rejected, batch_size=config.reference_batch_size)
    ref = [logps[valid_ids] for logps in reference]
    loss, _, _ = dpo_loss(*policy, *ref, config.beta, config.loss_variant, config.label_smoothing)
    rewards = reward_metrics(*policy, *ref, config.beta)
    return {
        "val_loss": loss.item(),
        "val_reward_accuracy": rewards["reward_accuracy"],
        "val_reward_margin": rewards["reward_margin"],
    }


if __name__ == "__main__":
    run(main)
