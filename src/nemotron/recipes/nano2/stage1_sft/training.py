"""Stage 1, step 2: supervised fine-tuning (SFT) of the stage-0 model on packed chats.

SFT continues training the pretrained model on conversations, with the loss only where the model
should learn to speak: assistant tokens and their `<|im_end|>` (the mask made by data curation).

Inputs: an `SFTDataset` (`--dataset-path`, `--dataset-artifact`, or stdin) and the stage-0
`PretrainCheckpoint` (`--checkpoint-path`, `--checkpoint-artifact`, stdin, or else the one recorded in
the dataset's lineage). Output: an `SFTCheckpoint` (`model/` loads with AutoModelForCausalLM and
AutoTokenizer alone, `metrics.jsonl`, `checkpoints/step_*` for resume; `watch.jsonl`, at each validation, the
per-token loss of a few held-out chats: `nemotron.training.watch`'s HELDOUT_TEXTS x HELDOUT_TOKENS tokens).

    python -m nemotron.recipes.nano2.stage1_sft.training --scale tiny --dataset-path runs/.../data_curation
    python -m nemotron.recipes.nano2.stage1_sft.data_curation | python -m nemotron.recipes.nano2.stage1_sft.training
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage1_sft.training --dataset-path ...

Supports: a per-token loss (every assistant token of an optimizer step weighs the same, whichever
micro-batch or rank holds it: the loop says why); packed rows (`--layout packed`, the default: the loss
never crosses a conversation and attention stays inside it; the Mamba-2 state carries over, measured
harmless at the `layout` field) or one chat per row (`--layout per_conversation`: exact, 3x slower);
AdamW, warmup then cosine decay, clipping, gradient accumulation; the validation loss every
`--eval-every` steps and at the end, ending (the rate annealed first) after `--patience` evaluations
without gain; resume after a kill (re-run the same command: it continues from the last checkpoint and
ends with the weights and loss of an uninterrupted run, bitwise on CPU); DDP under torchrun (Gloo on CPU, NCCL on GPU);
`--precision bf16` autocast. At `--scale full` (or `--engine megatron-bridge`) it writes and launches
a Megatron-Bridge run folder for the SFT recipe instead, starting from the stage-0 `MegatronBridgeRun`'s
checkpoint (`--checkpoint-path` then names that run).

Refuses, before training: a tokenizer (checkpoint's or dataset's) without `<|im_start|>`/`<|im_end|>`
as special tokens or without the nano2 chat template; a checkpoint whose tokenizer differs from the
dataset's (ids would mean other tokens); token ids beyond the model's embedding or rows beyond its
context; inputs of another scale; resuming a folder that holds a run with other settings or inputs;
any model too large for this machine's memory.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, SFTCheckpoint, SFTDataset
from nemotron.training.artifacts import MegatronBridgeRun
from nemotron.training.settings import FineTuningSettings

# Passes over the packed training rows per scale (the steps follow from the data; --patience stops earlier
# when the validation loss stops improving). Tiny: ~370 rows of chatterbot and skill chats, steps of 4 rows;
# the README's "How long SFT trains" shows the held-out curve around it and the steps its passes take.
EPOCHS = {"tiny": 3.6, "small": 3.0, "medium": 2.0, "full": 1.0}
# Handed off to Megatron-Bridge (--scale full, or --engine megatron-bridge), SFT runs for a number of iterations.
HAND_OFF_STEPS = {"tiny": 60, "small": 1000, "medium": 3000, "full": 10000}


@dataclass
class Config(FineTuningSettings):
    """Supervised fine-tuning of the stage-0 model (a PretrainCheckpoint) on packed chats (an SFTDataset),
    with the loss on assistant tokens only."""

    # 4 packed rows a step: at tiny, more smaller steps learn the skill sooner for the same compute.
    micro_batch_size: int = 4
    # Tiny: the chat markers were never seen in pretraining; measured (60 steps of chatterbot alone, a 400-step
    # base) valid loss 4.38 at lr 1e-3, 4.11 at 2e-3, 4.03 at 3e-3; with the skill, 5e-3 learnt it no sooner
    # (greedy right 0.65 vs 0.59 after 2.4 passes, 0.86 vs 0.82 after 3). The shared default, on purpose.
    lr: float = 3e-3
    # Packing (nemotron.training.packed_batches has the mechanics): the loss never crosses a conversation boundary
    # (mask 0 at each conversation's last position), and attention is block-diagonal (position_ids restart per
    # conversation; transformers builds the packed causal mask from them). The Mamba-2 state is NOT reset between
    # conversations: the CPU scans (transformers' and nemotron.models.mamba2) have no sub-sequence reset (only the
    # CUDA kernels take `seq_idx`), so the state and the 4-tap convolution carry over. We accept it, measured
    # (benchmarks/bench_sft_packing.py, tiny, SFT from a pretrained tiny base): the trained model scores its
    # validation chats packed vs alone within 4e-5 (relative); training packed instead of one chat per row changes
    # the validation loss by 0.002, ten times less than changing the seed of the row order (0.02); the exact
    # layout (per_conversation, each chat alone in a padded batch row) makes a step 3x slower. The carried state
    # decays geometrically, and every chat opens with template and user tokens before its first target.
    layout: Literal["packed", "per_conversation"] = "packed"
    """packed: rows as stored (Mamba state carries over); per_conversation: exact, one chat per batch row."""
    output_dir: Path = Path("runs/nano2/stage1_sft/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""
    seed: int = 0
    """Seeds the order of the packed rows."""


def main(config: Config) -> SFTCheckpoint | MegatronBridgeRun:
    # torch and transformers are imported here, not with the module, so `--help` answers without them.
    import torch

    from nemotron.data_prep.conversations import check_chat_tokenizer
    from nemotron.data_prep.packing import read_packed
    from nemotron.data_prep.tokenizer import check_same_vocabulary, load_tokenizer
    from nemotron.models.loading import ModelLimits, check_fits
    from nemotron.models.mamba2 import use_training_scan
    from nemotron.training.distributed import all_reduce_mean, sum_over_ranks
    from nemotron.training.megatron_bridge import hand_off
    from nemotron.training.optim import adamw_with_schedule, anneal
    from nemotron.training.packed_batches import (
        collate_packed,
        collate_per_conversation,
        masked_token_loss,
        validation_loss,
    )
    from nemotron.training.run import TrainingRun
    from nemotron.training.samplers import EpochSampler, planned_steps
    from nemotron.training.watch import heldout_chats, token_losses

    # --- inputs: the dataset and the model it starts from, checked against each other ---
    dataset = SFTDataset.load_input(config, "dataset")
    if config.hands_off:  # at scale: a GPU cluster fine-tunes the stage-0 Megatron checkpoint
        stage0 = MegatronBridgeRun.load_input(config, "checkpoint")
        return hand_off("sft", config, dataset, config.steps or HAND_OFF_STEPS[config.scale], dataset.pack_size,
                        stage0.checkpoint_location)
    train_rows, valid_rows = read_packed(dataset.train_packed), read_packed(dataset.valid_packed)
    steps = planned_steps(config, len(train_rows), config.epochs or EPOCHS[config.scale])
    piped = config.dataset_path is None and config.dataset_artifact is None
    base = load_upstream(
        PretrainCheckpoint, path=config.checkpoint_path, tracked_artifact=config.checkpoint_artifact,
        scale=config.scale, made_from=[dataset], stdin=piped, flag="--checkpoint-path",
    )
    # the bookkeeping (processes, seeds, resume, logging, checkpoints, the artifact); the algorithm stays here
    training = TrainingRun(config, inputs=[dataset, base], steps=steps, name="sft")
    tokenizer = load_tokenizer(dataset.tokenizer_dir)
    base_tokenizer = load_tokenizer(base.model_dir)
    check_chat_tokenizer(base_tokenizer, base.model_dir)
    check_chat_tokenizer(tokenizer, dataset.tokenizer_dir)
    check_same_vocabulary(base_tokenizer, tokenizer, f"checkpoint {base.model_dir}", f"dataset {dataset.path}")

    # --- model: the pretrained base, checked against this machine and the data ---
    rows = train_rows + valid_rows
    check_fits(ModelLimits.from_folder(base.model_dir), where=str(dataset.path),
               largest_id=max(int(row.input_ids.max()) for row in rows),
               longest=max(len(row.input_ids) for row in rows),
               fix="re-run data curation from this checkpoint (its tokenizer, a --pack-size within its context)")
    # The stage-0 hybrid: its Mamba-2 layers train on a CPU with our chunked scan (nemotron/models/mamba2.py: what a
    # Mamba-2 layer computes), the same maths and parameters as transformers' scan; the stage-0 step says more.
    model = use_training_scan(training.load_model(base.model_dir))
    forward, ddp, autocast = training.prepare(model)  # on the device, training mode; DDP under torchrun
    optimizer, scheduler = adamw_with_schedule(model, config, steps)  # AdamW; warmup, then cosine decay

    # --- data: seeded epochs over the packed rows ---
    rank, world_size = training.info.rank, training.info.world_size
    batches = EpochSampler(train_rows, config.micro_batch_size, config.grad_accum_steps, config.seed, rank, world_size)
    collate = collate_packed if config.layout == "packed" else collate_per_conversation
    pad_id = tokenizer.pad_token_id
    heldout = heldout_chats(valid_rows)  # a few fixed held-out chats, their per-token loss kept at each validation

    # --- training loop (resumes from the newest checkpoint of the output folder, if any) ---
    state = training.resume(model, optimizer, scheduler, batches, tokenizer)
    for step in range(state.step + 1, training.steps + 1):  # the planned steps, or where --patience ended a run
        micro_batches = [collate(rows, pad_id).to(training.device) for rows in batches.next_step()]
        # A per-token loss, as Megatron-Core's `calculate_per_token_loss`: each micro-batch's loss SUM over its
        # trained tokens, divided by the trained tokens of the whole step on all ranks over the world size (DDP
        # AVERAGES the ranks' gradients; distributed.sum_over_ranks writes the algebra out). Every assistant token
        # weighs the same, whichever micro-batch or rank holds it, so accumulation and DDP give the one-big-batch
        # gradient (tested); a per-micro-batch mean would over-weight the tokens of micro-batches with few targets
        # (the gradient-accumulation loss bug the HF Trainer fixed in v4.46, Oct 2024).
        trained = sum_over_ranks(sum(batch.num_loss_tokens for batch in micro_batches))
        trained_per_rank = max(trained, 1.0) / world_size
        step_loss = torch.zeros(())  # this rank's share of the step's loss per trained token, for the log
        for index, batch in enumerate(micro_batches):
            # Gradients add up in each parameter's .grad over the micro-batches (accumulation). DDP all-reduces
            # them during the last backward() only: no_sync() on the others saves an all-reduce per micro-batch.
            last = index == len(micro_batches) - 1
            sync = ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext()
            with sync, autocast:
                logits = forward(**batch.model_inputs(), use_cache=False).logits
                # masked_token_loss == (F.cross_entropy(logits.flatten(0, 1).float(), batch.labels.flatten(),
                # reduction="none") * batch.loss_mask.flatten()).sum(): the sum over trained positions only.
                loss = masked_token_loss(logits, batch) / trained_per_rank
            loss.backward()
            step_loss += loss.detach().cpu()
        # The update, as in stage 0: AdamW at this step's rate after clipping the gradient's global norm (the norm
        # before clipping is logged), then the schedule's next rate, and the gradients cleared for the next step.
        lr = scheduler.get_last_lr()[0]
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the step's loss per trained token over all ranks, and validation when due.
        validation = None
        if training.is_due(step, config.eval_every):
            loss_per_token = validation_loss(model, valid_rows, pad_id, collate, rank=rank, world_size=world_size,
                                             autocast=autocast)
            validation = {"val_loss": loss_per_token}
            if training.is_main:  # the held-out texts' per-token loss, kept for the browser (watch.jsonl)
                training.keep(step, "tokens", texts=token_losses(model, heldout, tokenizer, autocast))
        step_tokens = round(sum_over_ranks(sum(b.num_tokens for b in micro_batches)))
        training.record(step, loss=all_reduce_mean(step_loss).item(), lr=lr, grad_norm=grad_norm.item(),
                        tokens=step_tokens, validation=validation)
        if (last := training.patience_ends_run(step, validation)) is not None:  # --patience: end the run early,
            anneal(scheduler, step, last)  # the rate decaying to its floor at the run's new last step
        training.checkpoint_if_due(step)
        if step == training.steps:  # --patience ended the run here
            break

    # --- the model folder and the artifact ---
    return training.finish(SFTCheckpoint, metrics={"layout": config.layout})


if __name__ == "__main__":
    run(main)
