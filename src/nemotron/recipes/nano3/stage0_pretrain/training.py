"""Stage 0, step 2: pretrain the nano3 mixture-of-experts model (or, with --dense, its dense counterpart).

The same next-token prediction on the same windows as nano2's pretraining; what is new is the routing.
Every MoE layer's router picks `num_experts_per_tok` experts per token (`nemotron.models.nano3`), and
two mechanisms keep the experts evenly used, both as in Nemotron 3 Nano's Megatron-Bridge recipe:

    loss = cross-entropy + aux_loss_coeff x load-balancing loss     (seq_aux_loss, 1.0 per layer when even)
    after optimizer.step(): expert bias += bias_update_rate x sign(mean load - load)

`--dense` trains `nano3.dense_counterpart` instead: every MoE layer becomes one MLP as wide as the experts
a token visits plus the shared expert, so both models spend about the same parameters per token; it gets
the MoE run's steps times `DENSE_STEPS_PER_MOE_STEP` (1: the same tokens), or with `--equal-time` times
`MOE_STEP_TIME_RATIO` (the steps a dense model takes in the MoE run's time), each with its own full
schedule. The evaluation step compares the MoE model with each, paired over the held-out windows.

Input: a `PretrainDataset` made by nano2's stage-0 data curation (`--dataset-path`, or stdin). Output: a
`Nano3PretrainCheckpoint` (its metrics.jsonl also logs the routing, per step: see `training.record`; its
watch.jsonl, at each validation, the per-token loss of `nemotron.training.watch`'s HELDOUT_TEXTS held-out windows
of HELDOUT_TOKENS tokens).

    python -m nemotron.recipes.nano3.stage0_pretrain.training --dataset-path runs/nano3/stage0_pretrain/data_curation
    python -m nemotron.recipes.nano3.stage0_pretrain.training --dense --dataset-path ...
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano3.stage0_pretrain.training --dataset-path ...

Supports: resume after a kill (same command, same output folder; bitwise on CPU: the expert bias is a
model buffer, saved with the weights), DDP under torchrun (the expert loads are averaged over ranks
before the bias update, so every rank routes alike), `--model-overrides`, `--precision bf16`, WSD or
cosine schedules. At `--scale full` (31.6B parameters: no CPU trains it) or with `--engine megatron-bridge`
it does not train: like nano2's, it writes a Megatron-Bridge run folder for the recipe
`nemotron_3_nano_pretrain_8gpu_h100_bf16_config` and launches it (`--dry-run`: prints it); its artifact,
a `MegatronBridgeRun`, is the input of stage-1 SFT at scale (what the run folder sets: at `hand_off`).

    python -m nemotron.recipes.nano3.stage0_pretrain.training --scale full --dataset-path ... \\
        --data-root /lustre/team/nemotron --nodes 2 --gpus-per-node 8 --dry-run

Refuses: `--dense` with the hand-off (the dense counterpart is the CPU comparison; Megatron-Bridge has no
recipe for it), `--model-overrides` with the hand-off (they are transformers names the run folder does not
carry), a GPU count that expert parallelism does not divide, and everything nano2's pretraining refuses
(models that do not fit, token ids beyond the vocabulary, a folder of another run).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from nemotron.cli import per_scale, run
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import Nano3PretrainCheckpoint, PretrainDataset
from nemotron.training.artifacts import MegatronBridgeRun
from nemotron.training.settings import PretrainingSettings, parse_overrides

# Optimizer steps and window length per scale. Tiny: the README's Expected results gives the seconds of both
# runs (stage0_pretrain/training and training_dense) on 2 cores.
STEPS = {"tiny": 160, "small": 2000, "medium": 20000, "full": 100000}
SEQ_LEN = {"tiny": 256, "small": 512, "medium": 1024, "full": 8192}
# The dense counterpart's steps per MoE step: 1, so both models see the same tokens.
DENSE_STEPS_PER_MOE_STEP = 1.0
# With --equal-time: the MoE step's seconds over the dense step's, so the dense model trains as long as the MoE
# one. Transformers runs the chosen experts one after another, where a dense MLP is two matrix products, so the MoE
# step is slower at the same active parameters. A constant, not a live timing, so the run's steps, and so its
# weights, stay the same on any machine. Measured on the reference 2-core machine: benchmarks/bench_nano3.py
# (MoE and dense steps timed in turn, 6 rounds of 10, 2026-12-07, load average 8.6-9.8) 1.52x; the idle recipe
# run of 2026-12-04 (the README's Expected results then: stage-0 MoE 28.7 s, dense 19.5 s) 1.47x.
MOE_STEP_TIME_RATIO = 1.5


@dataclass
class Config(PretrainingSettings):
    """Pretrain the nano3 MoE model (or its dense counterpart) on bin/idx shards (nano2's stage-0 data curation)."""

    dense: bool = False
    """Train the dense counterpart (same active parameters) instead of the MoE model."""
    equal_time: bool = False
    """With --dense: MOE_STEP_TIME_RATIO x the MoE's steps (the MoE run's time) instead of its tokens."""
    steps: per_scale("Optimizer steps (x DENSE_STEPS_PER_MOE_STEP with --dense, x MOE_STEP_TIME_RATIO with "
                     "--dense --equal-time)", STEPS) = None
    aux_loss_coeff: float | None = None
    """Weight of the load-balancing loss; default nemotron.models.nano3.AUX_LOSS_COEFF (1e-4, Nano 3's)."""
    bias_update_rate: float | None = None
    """Expert-bias step per optimizer step (0 disables); default nano3.BIAS_UPDATE_RATE (1e-3, Megatron's)."""
    output_dir: Path = Path("runs/nano3/stage0_pretrain/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""


def main(config: Config) -> Nano3PretrainCheckpoint | MegatronBridgeRun:
    # torch and transformers are imported here, not with the module, so `--help` answers without them.
    from nemotron.data_prep.indexed import IndexedReader
    from nemotron.data_prep.tokenizer import load_tokenizer
    from nemotron.models import nano3
    from nemotron.models.loading import ModelLimits, check_fits
    from nemotron.models.mamba2 import use_training_scan
    from nemotron.training.distributed import all_reduce_mean
    from nemotron.training.losses import CausalLMLoss
    from nemotron.training.megatron_bridge import hand_off
    from nemotron.training.memory import check_trainable_here
    from nemotron.training.moe import ExpertBalance
    from nemotron.training.optim import adamw_with_schedule, optimizer_step
    from nemotron.training.run import TrainingRun
    from nemotron.training.watch import heldout_windows, token_losses
    from nemotron.training.windows import pretraining_backward, pretraining_windows, windows_loss

    # --- inputs; at scale, a GPU cluster trains the MoE model instead of this loop ---
    if config.hands_off and (config.dense or config.model_overrides):
        raise NemotronError(f"--scale {config.scale} with Megatron-Bridge trains the MoE model of the scale as it is: "
                            "drop --dense (the dense counterpart is the CPU comparison) and --model-overrides, or "
                            "train here with --scale tiny|small|medium --engine plain")
    if config.equal_time and not config.dense:
        raise NemotronError("--equal-time sets the dense counterpart's steps from the MoE run's time: add --dense")
    dataset = PretrainDataset.load_input(config, "dataset")
    per_moe_step = (MOE_STEP_TIME_RATIO if config.equal_time else DENSE_STEPS_PER_MOE_STEP) if config.dense else 1
    steps = config.steps or round(STEPS[config.scale] * per_moe_step)
    aux_coeff = nano3.AUX_LOSS_COEFF if config.aux_loss_coeff is None else config.aux_loss_coeff
    bias_rate = nano3.BIAS_UPDATE_RATE if config.bias_update_rate is None else config.bias_update_rate
    # The run folder (nemotron.training.megatron_bridge, family nano3) is filled from the dataset and these
    # settings, with --data-root, --nodes, --gpus-per-node. It sets our model shape (at full: the recipe's own,
    # 128 experts, top-6), the load balancing of --aux-loss-coeff and --bias-update-rate (Megatron's
    # moe_aux_loss_coeff, moe_router_bias_update_rate) and the recipe's parallelism at full: expert parallel 8
    # (16 experts per GPU), tensor parallel 1, so the GPU count must be a multiple of 8. The schedule is carried
    # over (--schedule wsd becomes Megatron's WSD, linear anneal).
    if config.hands_off:
        return hand_off("pretrain", config, dataset, steps, seq_length=config.seq_len or SEQ_LEN[config.scale],
                        family="nano3",
                        provider_overrides={"moe_aux_loss_coeff": aux_coeff, "moe_router_bias_update_rate": bias_rate})

    # --- compute init ---
    name = ("pretrain-dense-time" if config.equal_time else "pretrain-dense") if config.dense else "pretrain-moe"
    training = TrainingRun(config, inputs=[dataset], steps=steps, name=name)
    tokenizer = load_tokenizer(dataset.tokenizer_dir)

    # --- model: the MoE model of the scale, or its dense counterpart; checked before it is built ---
    moe_config = nano3.build_config(config.scale, dataset.vocab_size, **parse_overrides(config.model_overrides))
    model_config = nano3.dense_counterpart(moe_config) if config.dense else moe_config
    check_trainable_here(config.scale, nano3.count_parameters(model_config), training.info.world_size)
    seq_len = config.seq_len or SEQ_LEN[config.scale]
    largest = max(IndexedReader(prefix).max_token_id() for prefix in dataset.train_prefixes + dataset.valid_prefixes)
    check_fits(ModelLimits.of(model_config), largest_id=largest, longest=seq_len, where=str(dataset.path),
               fix="lower --seq-len, or re-run data curation with this model's vocabulary")
    # On a CPU the Mamba-2 layers train with our chunked scan (models/mamba2.py; nano2's stage-0 step says why).
    model = use_training_scan(nano3.build_model(model_config, seed=config.seed))
    forward, ddp, autocast = training.prepare(CausalLMLoss(model))  # the blocked loss, as nano2's pretraining
    # The routers' load balancing (none in the dense model): the auxiliary loss, the expert bias, the log.
    balance = ExpertBalance(model, moe_config.num_experts_per_tok, aux_coeff, bias_rate)
    active = nano3.count_parameters(model) if config.dense else nano3.active_parameters(model_config)
    if training.is_main:
        print(f"nano3 {config.scale}{' dense counterpart' if config.dense else ''}: "
              f"{nano3.count_parameters(model) / 1e6:.2f}M parameters, {active / 1e6:.2f}M active per token, "
              f"{nano3.describe_pattern(''.join(_symbols(model_config)))}", file=sys.stderr)

    optimizer, scheduler = adamw_with_schedule(model, config, steps)
    train, valid, valid_ids = pretraining_windows(
        dataset, seq_len, config.micro_batch_size, config.grad_accum_steps, config.eval_batches, config.seed,
        training.info.rank, training.info.world_size)
    heldout = heldout_windows(valid)  # a few fixed held-out windows, their per-token loss kept at each validation

    # --- training loop (resumes from the newest checkpoint of the output folder, if any) ---
    state = training.resume(model, optimizer, scheduler, train, tokenizer)
    for step in range(state.step + 1, steps + 1):
        windows = train.next_batch()
        # Cross-entropy per target of the global batch + coeff x the load-balancing loss of what the routers
        # chose (Switch Transformer; Megatron's seq_aux_loss); its gradient reaches only the router weights.
        step_loss = pretraining_backward(forward, ddp, autocast, windows, config.micro_batch_size, training.device,
                                         balance)
        grad_norm, lr = optimizer_step(model, optimizer, scheduler, config.grad_clip)  # clip, AdamW, schedule
        balance.after_step()  # expert bias += rate x sign(mean load - load), same loads on every rank

        validation = None
        if training.is_due(step, config.eval_every):
            validation = {"val_loss": windows_loss(model, valid, valid_ids, config.micro_batch_size, autocast)}
            if training.is_main:  # the held-out texts' per-token loss, kept for the browser (watch.jsonl)
                training.keep(step, "tokens", texts=token_losses(model, heldout, tokenizer, autocast))
        # The routing, per step, for the reader to watch it settle: `aux_loss` (per MoE layer, before the
        # coefficient: 1.0 is perfect balance), `expert_load` (per layer, each expert's share of routed slots)
        # and `max_load` (the busiest expert's share over the even share, 1.0 = even).
        training.record(step, loss=all_reduce_mean(step_loss).item(), lr=lr, grad_norm=grad_norm,
                        tokens=train.tokens_per_batch, validation=validation, **balance.log())
        training.checkpoint_if_due(step)

    return training.finish(Nano3PretrainCheckpoint, dense=config.dense, parameters=nano3.count_parameters(model),
                           active_parameters=active, metrics={
                          "parameters": nano3.count_parameters(model),
                          "active_parameters": active,
                          "epochs": training.state.tokens / max(train.num_tokens, 1),
                      })


def _symbols(model_config) -> list[str]:
    """The layer pattern of a config built from a list of layer types (the dense counterpart has one)."""
    names = {"linear_attention": "M", "moe": "E", "full_attention": "*", "mlp": "-"}
    return [names[kind] for kind in model_config.layers_block_type]


if __name__ == "__main__":
    run(main)
