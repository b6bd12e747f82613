"""Stage 0, step 2: pretrain the nano2 hybrid Mamba-Transformer from scratch on the curated shards.

Next-token prediction on fixed-length windows of the token stream (the GPT recipe): every token of the
training split is predicted from the tokens before it; the loss is the mean cross-entropy over them all.

Input: a `PretrainDataset` (`--dataset-path`, `--dataset-artifact`, or stdin). Output: a
`PretrainCheckpoint` (`model/` loads with AutoModelForCausalLM and AutoTokenizer alone,
`metrics.jsonl`, `checkpoints/step_*` for resume; `watch.jsonl`, at each validation, the per-token loss of
a few held-out windows: `nemotron.training.watch`'s HELDOUT_TEXTS x HELDOUT_TOKENS tokens).

    python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny --dataset-path runs/.../data_curation
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.training
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage0_pretrain.training --dataset-path ...

Supports: the `nemotron.models.nano2` model at the run's scale, any shape by `--model-overrides`
(`hidden_size=192 hybrid_override_pattern=M-M*-`); AdamW (betas 0.9/0.95), linear warmup then
warmup-stable-decay (or `--schedule cosine`), clipping, gradient accumulation; `--device auto|cpu|cuda`,
`--precision auto|bf16|fp32` (bf16 autocast on a GPU, fp32 on a CPU), `--compile on|off|auto`; the
validation loss every `--eval-every` steps and at the end; resume after a kill (re-run the same command
on the same folder: it continues from the last checkpoint (weights, optimizer, schedule, RNG, data
position) and ends with the weights and loss of an uninterrupted run, bitwise on CPU; also on another
device, precision or thread count); DDP under
torchrun (Gloo on CPU, NCCL on GPU). At `--scale full` (or `--engine megatron-bridge`) it does not
train: it writes a Megatron-Bridge run of the `nemotron_nano_9b_v2` pretraining recipe and launches it
(`--dry-run`: prints it), saving a `MegatronBridgeRun` (`nemotron.training.megatron_bridge`).

Refuses, before training: a model whose weights and optimizer state would not fit this machine's
memory (use Megatron-Bridge for those); missing or truncated shards; a sequence length beyond the
model's `max_position_embeddings`, or token ids beyond its vocabulary; resuming a folder that holds a
checkpoint of another architecture, or of a run with other settings or inputs; inputs of another scale.
"""

from __future__ import annotations

import contextlib
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact.fields import bookkeeping
from nemotron.cli import per_scale, run
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset
from nemotron.training.artifacts import MegatronBridgeRun
from nemotron.training.settings import PretrainingSettings, parse_overrides

# Optimizer steps and window length per scale. Tiny: the README's Expected results gives its seconds on 2
# cores (stage0_pretrain/training), ~0.2 epochs of Shakespeare: what the recipe's 120 s budget leaves
# stage 0 once SFT and DPO have theirs. Measured with warmup-stable-decay: held-out loss 4.80 nats/token at
# 150 steps, 4.67 at 200, 4.34 at 340 (0.700x the unigram's bits per byte); SFT's skill and DPO's lesson
# hold at 150 (the README).
STEPS = {"tiny": 150, "small": 2000, "medium": 20000, "full": 100000}
SEQ_LEN = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}


@dataclass
class Config(PretrainingSettings):
    """Pretrain the nano2 model from scratch on bin/idx shards."""

    steps: per_scale("Optimizer steps", STEPS) = None
    # A checkpoint (weights, AdamW state, data position) costs ~0.8 s at tiny: every 100 steps, not 40.
    checkpoint_every: int = bookkeeping(100)
    """Checkpoint every this many steps (and at the last); a killed run resumes from the newest."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""


def main(config: Config) -> PretrainCheckpoint | MegatronBridgeRun:
    # torch and transformers are imported here, not with the module, so `--help` answers without them.
    import torch

    from nemotron.data_prep.indexed import IndexedReader
    from nemotron.data_prep.tokenizer import load_tokenizer
    from nemotron.models.loading import ModelLimits, check_fits
    from nemotron.models.mamba2 import use_training_scan
    from nemotron.models.nano2 import build_config, build_model, count_parameters, describe_pattern
    from nemotron.training.distributed import all_reduce_mean, sum_over_ranks
    from nemotron.training.losses import CausalLMLoss
    from nemotron.training.megatron_bridge import hand_off
    from nemotron.training.memory import check_trainable_here
    from nemotron.training.optim import adamw_with_schedule
    from nemotron.training.run import TrainingRun
    from nemotron.training.watch import heldout_windows, token_losses
    from nemotron.training.windows import pretraining_windows, windows_loss

    # --- inputs; at scale, a GPU cluster trains instead of this loop ---
    dataset = PretrainDataset.load_input(config, "dataset")
    steps = config.steps or STEPS[config.scale]
    if config.hands_off:
        return hand_off("pretrain", config, dataset, steps, seq_length=config.seq_len or SEQ_LEN[config.scale])

    # --- compute init: the bookkeeping (processes, seeds, resume, logging, checkpoints, the artifact) is the
    # training run's; what this file keeps is the algorithm ---
    training = TrainingRun(config, inputs=[dataset], steps=steps, name="pretrain")
    tokenizer = load_tokenizer(dataset.tokenizer_dir)

    # --- model: checked against this machine and the data before it is built ---
    model_config = build_config(config.scale, dataset.vocab_size, **parse_overrides(config.model_overrides))
    check_trainable_here(config.scale, count_parameters(model_config), training.info.world_size)
    seq_len = config.seq_len or SEQ_LEN[config.scale]
    largest = max(IndexedReader(prefix).max_token_id() for prefix in dataset.train_prefixes + dataset.valid_prefixes)
    check_fits(ModelLimits.of(model_config), largest_id=largest, longest=seq_len, where=str(dataset.path),
               fix="lower --seq-len, or re-run data curation with this model's vocabulary")
    # The model is a hybrid: Mamba-2 layers (a selective state space read in one linear pass) between attention
    # and MLP layers (nemotron.models.nano2). On a CPU its Mamba-2 layers train with our chunked SSD scan: the
    # same maths as transformers' PyTorch scan, the same parameters and saved folder, 1.3x faster a step at tiny.
    # nemotron/models/mamba2.py writes out what a Mamba-2 layer computes; a GPU with mamba_ssm installed keeps
    # transformers' forward and its CUDA kernels (without mamba_ssm, a GPU trains with our scan too).
    model = use_training_scan(build_model(model_config, seed=config.seed))
    # The loss is one named call: loss_of(x, y) == F.cross_entropy(model(x).logits.flatten(0, 1), y.flatten()),
    # the mean over all targets, to float rounding. It applies the output head a block of tokens at a time and
    # never holds the full logits; the plain expression runs at ~0.8x its speed on a CPU (training/losses.py).
    # On the device, training mode; DDP under torchrun; compiled with --compile (every window has the same
    # shape: on one GPU its compiled step is replayed as CUDA graphs, nemotron.training.compilation).
    loss_of, ddp, autocast = training.prepare(CausalLMLoss(model), static_shapes=True)
    if training.is_main:
        print(f"nano2 {config.scale}: {count_parameters(model) / 1e6:.2f}M parameters, "
              f"{describe_pattern(model_config.hybrid_override_pattern)}", file=sys.stderr)

    # AdamW (torch's fused kernel where it runs; weight decay on matrices only); warmup, then WSD (or cosine)
    optimizer, scheduler = adamw_with_schedule(model, config, steps)

    # --- data: seeded windows of seq_len + 1 tokens over the train shards, each rank its slice of every
    # global batch (nemotron.training.windows); a fixed slice of the valid shards ---
    train, valid, valid_ids = pretraining_windows(
        dataset, seq_len, config.micro_batch_size, config.grad_accum_steps, config.eval_batches, config.seed,
        training.info.rank, training.info.world_size)
    heldout = heldout_windows(valid)  # a few fixed held-out windows, their per-token loss kept at each validation

    # --- training loop (resumes from the newest checkpoint of the output folder, if any) ---
    state = training.resume(model, optimizer, scheduler, train, tokenizer)
    for step in range(state.step + 1, steps + 1):
        windows = train.next_batch()  # this rank's (micro_batch_size x grad_accum_steps, seq_len + 1) token ids
        micro_batches = windows.split(config.micro_batch_size)
        # Every target of the GLOBAL batch weighs the same: a micro-batch's mean loss is weighted by its targets
        # over the step's targets on all ranks x the world size, since DDP AVERAGES the ranks' gradients
        # (distributed.sum_over_ranks writes the algebra out). Windows all hold seq_len targets, so this is exactly
        # 1/grad_accum_steps here; counting keeps it right for any batch.
        targets_per_rank = sum_over_ranks(windows[:, 1:].numel()) / training.info.world_size
        step_loss = torch.zeros(())  # this rank's share of the step's mean loss, for the log
        for index, micro in enumerate(micro_batches):
            # Gradients add up in each parameter's .grad over the micro-batches (accumulation). DDP all-reduces
            # them during the last backward() only: no_sync() on the others saves an all-reduce per micro-batch.
            last = index == len(micro_batches) - 1
            sync = ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext()
            with sync, autocast:
                micro = training.to_device(micro)
                loss = loss_of(micro[:, :-1], micro[:, 1:]) * (micro[:, 1:].numel() / targets_per_rank)
            loss.backward()
            step_loss += loss.detach().cpu()
        # Clip the global gradient norm (the norm before clipping is logged), then one AdamW update at this step's
        # learning rate, the schedule's next rate, and the gradients cleared for the next step.
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the batch loss over all ranks, and the validation loss when due.
        validation = None
        if training.is_due(step, config.eval_every):
            validation = {"val_loss": windows_loss(model, valid, valid_ids, config.micro_batch_size, autocast)}
            if training.is_main:  # the held-out texts' per-token loss, kept for the browser (watch.jsonl)
                training.keep(step, "tokens", texts=token_losses(model, heldout, tokenizer, autocast))
        training.record(step, loss=all_reduce_mean(step_loss).item(), lr=lr, grad_norm=grad_norm.item(),
                        tokens=train.tokens_per_batch, validation=validation)
        training.checkpoint_if_due(step)

    # --- the model folder and the artifact ---
    return training.finish(PretrainCheckpoint, metrics={
        "parameters": count_parameters(model),
        "epochs": training.state.tokens / max(train.num_tokens, 1),
    })


if __name__ == "__main__":
    run(main)
