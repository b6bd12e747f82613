"""Stage 0, step 2: pretrain the nano2 hybrid Mamba-Transformer from scratch on the curated shards.

Next-token prediction on fixed-length windows of the token stream (the GPT recipe): the model
predicts every token of the training split from the tokens before it, and the loss is the mean
cross-entropy over all predicted tokens.

Input: a `PretrainDataset` (`--dataset-path`, `--dataset-artifact`, or stdin). Output: a
`PretrainCheckpoint` (`model/` loads with AutoModelForCausalLM and AutoTokenizer alone,
`metrics.jsonl`, `checkpoints/step_*` for resume).

    python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny --dataset-path runs/.../data_curation
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation | python -m nemotron.recipes.nano2.stage0_pretrain.training
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage0_pretrain.training --dataset-path ...

Supports:
- the model of `nemotron.models.nano2` at the run's scale, every shape overridable
  (`--model-overrides hidden_size=192 hybrid_override_pattern=M-M*-`);
- windows of `seq_len + 1` tokens read from the bin/idx shards in a seeded order (nemotron.training.windows);
- AdamW (betas 0.9/0.95, decay on matrices only), linear warmup then warmup-stable-decay (cosine with
  `--schedule cosine`), gradient clipping, gradient accumulation; fused AdamW; the loss from the last hidden
  states a block of tokens at a time (nemotron.training.losses), never the full logits;
- `--device auto|cpu|cuda` and `--precision auto` (bf16 autocast on a GPU, fp32 on a CPU; `bf16` or
  `fp32` to choose); a checkpoint resumes on another device, precision or thread count;
- validation loss on the valid shards every `--eval-every` steps and at the end;
- resume after a kill: re-run the same command with the same output folder; it continues from the last
  checkpoint (weights, optimizer, scheduler, RNG, data position) and ends with the same weights and
  loss as an uninterrupted run (bitwise on CPU);
- DDP under torchrun (Gloo on CPU, NCCL on GPU): each rank takes its slice of every global batch.

At `--scale full` (or with `--engine megatron-bridge`) the step does not train: it writes a Megatron-Bridge
run folder for the `nemotron_nano_9b_v2` pretraining recipe, filled from the dataset and these settings,
and launches it (`--dry-run`: prints it) with `--data-root`, `--nodes`, `--gpus-per-node`
(`nemotron.training.megatron_bridge`); its artifact is a `MegatronBridgeRun`.

Refuses, before training: any model whose weights and optimizer state would not fit in this machine's
memory (use Megatron-Bridge for those); shards that are missing or
truncated; a sequence length beyond the model's `max_position_embeddings`; token ids beyond the
model's vocabulary; resuming a folder that holds a checkpoint of another architecture or of a run with
other settings or inputs; inputs of another scale.

The bookkeeping (processes, seeds, resume, logging, checkpoints, the final artifact) is
`nemotron.training.run.TrainingRun`; what is left here is the algorithm. torch and transformers are
imported inside `main`, so `--help` answers without loading them.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset
from nemotron.training.artifacts import MegatronBridgeRun
from nemotron.training.settings import TrainingSettings, parse_overrides

# Optimizer steps and window length per scale. Tiny: ~65 s on 2 idle cores (~9,600 tokens/s with 2
# threads), ~0.45 epochs of Shakespeare; 340 rather than 300 steps because warmup-stable-decay then
# reaches 0.700x the unigram's held-out bits per byte (0.706x at 300) for ~8 s more.
STEPS = {"tiny": 340, "small": 2000, "medium": 20000, "full": 100000}
SEQ_LEN = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}


@dataclass
class Config(TrainingSettings):
    """Pretrain the nano2 model from scratch on bin/idx shards."""

    dataset_path: Path | None = None
    """A PretrainDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `pretraindataset:latest`."""
    steps: int | None = None
    """Optimizer steps; default per scale (tiny 340)."""
    seq_len: int | None = None
    """Tokens per training window; default per scale (tiny 256)."""
    micro_batch_size: int = 8
    """Windows per forward pass (per process)."""
    grad_accum_steps: int = 1
    """Micro-batches per optimizer step; global batch = micro_batch_size x grad_accum_steps x processes."""
    lr: float = 3e-3
    """Peak learning rate; small models tolerate (and need) a high one."""
    min_lr_ratio: float = 0.1
    """The cosine decay ends at lr x this."""
    warmup_steps: int | None = None
    """Linear warmup; default 10% of the steps."""
    weight_decay: float = 0.1
    """AdamW weight decay, on weight matrices only (not on norms, biases or embeddings of 1-D params)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 disables)."""
    model_overrides: tuple[str, ...] = ()
    """NemotronHConfig fields as KEY=VALUE (JSON values), e.g. hidden_size=192."""
    schedule: Literal["cosine", "wsd"] = "wsd"
    """Warmup-stable-decay by default for pretraining (Hu et al., 2024; the Nano 3 run's schedule).
    Measured at tiny (300 steps, lr 3e-3, same data and seed): held-out bits per byte 0.722x the
    unigram's with cosine decay, 0.706x with WSD decaying over the last 20% and 0.705x over 30%; lr
    5e-3 was worse with either schedule (0.716x cosine, 0.708x WSD); 340 WSD steps: 0.700x."""
    decay_fraction: float = 0.2
    """With --schedule wsd: the share of the steps over which the rate decays (see --schedule)."""
    eval_batches: int = 8
    """Global batches of validation windows per evaluation (the whole valid split if it is smaller)."""
    eval_every: int = 40
    """Validation loss every this many steps (and at the last): 8 points on tiny's 300-step curve."""
    checkpoint_every: int = 40
    """Checkpoint every this many steps (and at the last); a killed run resumes from the newest."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""
    seed: int = 0
    """Seeds the weights and the order of the windows."""


def main(config: Config) -> PretrainCheckpoint | MegatronBridgeRun:
    import contextlib

    import torch

    from nemotron.data_prep.indexed import IndexedReader
    from nemotron.data_prep.tokenizer import load_tokenizer
    from nemotron.models.loading import ModelLimits, check_fits
    from nemotron.models.nano2 import build_config, build_model, count_parameters, describe_pattern
    from nemotron.training.compute import all_reduce_mean, check_trainable_here
    from nemotron.training.losses import CausalLMLoss
    from nemotron.training.megatron_bridge import hand_off
    from nemotron.training.optim import adamw_with_schedule
    from nemotron.training.run import TrainingRun
    from nemotron.training.windows import pretraining_windows, windows_loss

    # --- inputs; at scale, a GPU cluster trains instead of this loop ---
    dataset = PretrainDataset.load_input(config, "dataset")
    steps = config.steps or STEPS[config.scale]
    if config.hands_off:
        return hand_off("pretrain", config, dataset, steps, seq_length=config.seq_len or SEQ_LEN[config.scale])

    # --- compute init ---
    run = TrainingRun(config, inputs=[dataset], steps=steps, name="pretrain")
    tokenizer = load_tokenizer(dataset.tokenizer_dir)

    # --- model: checked against this machine and the data before it is built ---
    model_config = build_config(config.scale, dataset.vocab_size, **parse_overrides(config.model_overrides))
    check_trainable_here(config.scale, count_parameters(model_config), run.info.world_size)
    seq_len = config.seq_len or SEQ_LEN[config.scale]
    largest = max(IndexedReader(prefix).max_token_id() for prefix in dataset.train_prefixes + dataset.valid_prefixes)
    check_fits(ModelLimits.of(model_config), largest_id=largest, longest=seq_len, where=str(dataset.path),
               fix="lower --seq-len, or re-run data curation with this model's vocabulary")
    model = build_model(model_config, seed=config.seed)
    # The loss takes the last hidden states and applies the output head a block of tokens at a time
    # (nemotron.training.losses): the plain loss over full logits at ~0.8x the speed on a CPU.
    forward, ddp, autocast = run.prepare(CausalLMLoss(model))  # on the device, training mode; DDP under torchrun
    if run.is_main:
        print(f"nano2 {config.scale}: {count_parameters(model) / 1e6:.2f}M parameters, "
              f"{describe_pattern(model_config.hybrid_override_pattern)}", file=sys.stderr)

    optimizer, scheduler = adamw_with_schedule(model, config, steps)  # AdamW, warmup + cosine decay

    # --- data: seeded windows over the train shards; a fixed slice of the valid shards ---
    train, valid, valid_ids = pretraining_windows(dataset, seq_len, config.micro_batch_size, config.grad_accum_steps,
                                                  config.eval_batches, config.seed, run.info.rank, run.info.world_size)

    # --- training loop (resumes from the newest checkpoint of the output folder, if any) ---
    state = run.resume(model, optimizer, scheduler, train, tokenizer)
    for step in range(state.step + 1, steps + 1):
        windows = train.next_batch()  # this rank's (micro_batch_size x grad_accum_steps, seq_len + 1)
        lr = scheduler.get_last_lr()[0]  # the rate this step uses
        step_loss = torch.zeros(())
        for index, micro in enumerate(windows.split(config.micro_batch_size)):
            last = index == config.grad_accum_steps - 1
            # Every micro-batch has the same number of targets, so the mean of micro-batch means is
            # the mean over the whole batch; DDP averages gradients over ranks the same way.
            with (ddp.no_sync() if ddp and not last else contextlib.nullcontext()), autocast:
                micro = run.to_device(micro)
                loss = forward(micro[:, :-1], micro[:, 1:]) / config.grad_accum_steps  # mean cross-entropy
            loss.backward()
            step_loss += loss.detach().cpu()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the batch loss over all ranks, and the validation loss when due.
        validation = None
        if run.is_due(step, config.eval_every):
            validation = {"val_loss": windows_loss(model, valid, valid_ids, config.micro_batch_size, autocast)}
        run.record(step, loss=all_reduce_mean(step_loss).item(), lr=lr, grad_norm=grad_norm.item(),
                   tokens=train.tokens_per_batch, validation=validation)
        run.checkpoint_if_due(step)

    # --- the model folder and the artifact ---
    return run.finish(PretrainCheckpoint, metrics={
        "parameters": count_parameters(model),
        "epochs": run.state.tokens / max(train.num_tokens, 1),
    })


if __name__ == "__main__":
    run(main)
