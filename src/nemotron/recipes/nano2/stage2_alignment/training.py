"""Stage 2, step 2: align the SFT model with Direct Preference Optimization (DPO).

DPO (Rafailov et al., 2023, "Direct Preference Optimization: Your Language Model is Secretly a Reward
Model") trains a policy pi, initialised from the SFT model, to prefer the chosen answer y_w over the
rejected answer y_l of each pair, relative to a frozen reference pi_ref (the SFT model itself):

    loss = -log sigmoid(beta * [(log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))])

plus, by default, the chosen answers' mean NLL per token (`--sft-weight 1`, RPO: the Config's comment has the
seeds that chose it; `--sft-weight 0` is DPO alone). No reward model and no sampling: the loss needs only the
summed log-probabilities of the two given answers (`nemotron.training.logprobs`, `nemotron.training.dpo`), and the
reference's are computed once, before the first step (the reference pass in `main` says why and what it saves).
`--loss-variant conservative --label-smoothing 0.1` is cDPO (Mitchell, 2023); `--loss-variant ipo` is IPO
(Azar et al., 2023).

Inputs: a `PreferenceDataset` (`--dataset-path`, `--dataset-artifact`, or stdin: pairs already
tokenized, length-filtered and split into train and validation by stage-2 data curation) and the stage-1
`SFTCheckpoint` to align (`--checkpoint-path`, `--checkpoint-artifact`, or stdin). Output: a
`DPOCheckpoint` (`model/` loads with AutoModelForCausalLM and AutoTokenizer alone, `metrics.jsonl`,
`checkpoints/step_*` and `reference_logps.pt` for resume).

    python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny \\
        --dataset-path runs/nano2/stage2_alignment/data_curation --checkpoint-path runs/nano2/stage1_sft/training
    python -m nemotron.recipes.nano2.stage2_alignment.data_curation --scale tiny --dataset-path SFT_DATA \\
        | python -m nemotron.recipes.nano2.stage2_alignment.training --scale tiny --checkpoint-path SFT_CKPT
    torchrun --nproc_per_node 2 -m nemotron.recipes.nano2.stage2_alignment.training --dataset-path ...

Supports: metrics per step as TRL's DPOTrainer logs them (loss, reward accuracy and margin of the implicit rewards
beta * log(pi / pi_ref), the policy's log-probs of chosen and rejected, nll_loss with --sft-weight, lr,
grad_norm), and the same on the validation pairs every `--eval-every` steps; AdamW, linear warmup then cosine
decay, clipping, accumulation; resume after a kill (the same command: the weights and loss of an uninterrupted
run, bitwise on CPU); DDP under torchrun (Gloo on CPU, NCCL on GPU: each rank its slice of every global batch;
rank 0 computes the reference log-probs, the others read them); `--precision bf16` autocast.

Refuses, before training starts: `--scale full` (at scale DPO runs on NeMo-RL, not Megatron-Bridge: the
error says what it needs); an SFT checkpoint of another scale; models too large for this machine; a
checkpoint whose tokenizer differs from the dataset's (ids would mean other tokens); loss settings DPO
does not define (label smoothing without the conservative variant, beta <= 0); resuming an output
folder that holds a run with other settings or inputs; fewer training pairs than one global batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.artifact.fields import bookkeeping
from nemotron.cli import run
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import DPOCheckpoint, PreferenceDataset, SFTCheckpoint
from nemotron.training.settings import ContinuedTrainingSettings

# Passes over the training pairs per scale (the steps follow from the data; --patience ends a run earlier,
# its rate annealed first).
EPOCHS = {"tiny": 1.0, "small": 1.0, "medium": 1.0, "full": 1.0}
REFERENCE_LOGPS = "reference_logps.pt"


@dataclass
class Config(ContinuedTrainingSettings):
    """DPO of the SFT model (an SFTCheckpoint) on preference pairs (a PreferenceDataset), against the frozen
    SFT model as the reference."""

    beta: float = 0.1
    """Strength of the pull towards the reference: the implicit reward is beta * log(pi / pi_ref)."""
    loss_variant: Literal["sigmoid", "conservative", "ipo"] = "sigmoid"
    """sigmoid: DPO; conservative: cDPO (needs --label-smoothing); ipo: IPO's squared loss."""
    label_smoothing: float = 0.0
    """cDPO's assumed probability that a preference label is flipped (0 < eps < 0.5)."""
    sft_weight: float = 1.0
    """Weight of an NLL term on the chosen answers (their mean NLL per token), added to the DPO loss, as Llama 3
    and Nemotron-4 340B train (Pang et al., 2024 call it RPO); 0 is plain DPO."""
    # Chosen over seeds, with --sft-weight: plain DPO at 5e-5 (the algorithm alone, the default until 2026-12-07)
    # taught little where SFT had learnt the skill less well (seeds 3-9: 2.7 to 28.6 standard errors, the 2.7 in
    # the seed whose SFT was weakest), and with an earlier version of the pairs nothing at all in one seed. The NLL
    # of the chosen answers keeps them up while DPO pushes the rejected ones down (the "likelihood displacement"
    # of Razin et al., 2024, which had made a larger rate unsafe); with it, four times the rate taught every seed
    # by 18 standard errors or more (the recipe README's lessons table), and the README's "DPO's settings,
    # measured" sets the variants side by side.
    lr: float = 2e-4
    # No decay, as in the DPO paper and TRL: the KL-like pull to the reference already regularises.
    weight_decay: float = 0.0
    watch_every: int = bookkeeping(10)
    """Every this many steps and at the last, keep in watch.jsonl each probe pair's chosen and rejected log-ratio
    and implicit reward (four numbers a pair; nemotron.training.watch.PROBE_PAIRS training pairs and as many
    held-out ones), measured by a no-gradient pass over the probes."""
    reference_batch_size: int = 32
    """Sequences per forward pass of the one-time reference pass and of validation."""
    output_dir: Path = Path("runs/nano2/stage2_alignment/training")
    """The run folder: checkpoints, metrics.jsonl, the final model/ and the artifact."""
    seed: int = 0
    """Seeds the order of pairs."""


def main(config: Config) -> DPOCheckpoint:
    # torch and transformers are imported here, not with the module, so `--help` answers without them.
    import torch
    import torch.nn.functional as F

    from nemotron.data_prep.conversations import check_chat_tokenizer
    from nemotron.data_prep.preference import read_tokenized_pairs
    from nemotron.data_prep.tokenizer import check_same_vocabulary, load_tokenizer
    from nemotron.models.loading import load_model
    from nemotron.models.mamba2 import use_training_scan
    from nemotron.training.distributed import all_reduce_mean, barrier, gradient_sync, sum_over_ranks
    from nemotron.training.dpo import (
        check_dpo_settings,
        dpo_step_metrics,
        dpo_validation,
        load_reference_logps,
        preference_losses,
        reference_pass,
        save_reference_logps,
        scored_reference,
    )
    from nemotron.training.logprobs import completion_logprobs, pair_logprobs
    from nemotron.training.megatron_bridge import DPO_AT_SCALE
    from nemotron.training.optim import adamw_with_schedule, anneal
    from nemotron.training.run import TrainingRun
    from nemotron.training.samplers import EpochSampler, planned_steps
    from nemotron.training.watch import DPOProbes

    # --- inputs: the tokenized pairs and the SFT model, checked against each other ---
    if config.hands_off:
        raise NemotronError(DPO_AT_SCALE)
    check_dpo_settings(config.beta, config.loss_variant, config.label_smoothing)
    dataset = PreferenceDataset.load_input(config, "dataset")
    sft = SFTCheckpoint.load_input(config, "checkpoint")
    train, valid = read_tokenized_pairs(dataset.train_tokens), read_tokenized_pairs(dataset.valid_tokens)
    steps = planned_steps(config, len(train[0]), config.epochs or EPOCHS[config.scale])
    # the bookkeeping (processes, seeds, resume, logging, checkpoints, the artifact); the algorithm stays here
    training = TrainingRun(config, inputs=[dataset, sft], steps=steps, name="dpo")
    tokenizer, sft_tokenizer = load_tokenizer(dataset.tokenizer_dir), load_tokenizer(sft.model_dir)
    check_chat_tokenizer(sft_tokenizer, sft.model_dir)
    check_same_vocabulary(sft_tokenizer, tokenizer, f"checkpoint {sft.model_dir}", f"dataset {dataset.path}")

    # --- model: the policy starts as the SFT model ---
    model = use_training_scan(training.load_model(sft.model_dir))  # CPU: Mamba-2's chunked scan (models/mamba2.py)
    forward, ddp, autocast = training.prepare(model)  # on the device, training mode; DDP under torchrun
    optimizer, scheduler = adamw_with_schedule(model, config, steps)  # AdamW; warmup, then cosine decay

    # --- data: seeded shuffled batches of pair indices ---
    global_batch = config.micro_batch_size * config.grad_accum_steps * training.info.world_size
    if len(train[0]) < global_batch:
        raise NemotronError(
            f"{dataset.train_tokens}: {len(train[0])} training pairs, fewer than one global batch of {global_batch}; "
            "add pairs, raise stage-2 curation's --max-length, or lower the batch settings"
        )
    batches = EpochSampler(range(len(train[0])), config.micro_batch_size, config.grad_accum_steps, config.seed,
                           training.info.rank, training.info.world_size)

    # --- reference log-probs: the frozen SFT model, one pass over the pairs, stored with the run ---
    # The reference term of the DPO loss is a constant per pair (Rafailov et al., 2023, eq. 7), so it is
    # computed ONCE, in one pass of the frozen SFT model, and stored in output_dir/reference_logps.pt with the
    # run's checkpoints: every later step and every resume reads it instead of running a second model. A step is
    # then one policy forward + backward over the chosen and rejected answers (one concatenated batch, as TRL's
    # `concatenated_forward`), not that plus two reference forwards: ~1.9x the cost of an SFT step on the same
    # batch instead of ~2.5x (benchmarks/bench_dpo_vs_sft.py). Only the training pairs this run's steps visit
    # are scored (480 of ~1,600 at tiny; all of them once the steps span an epoch), and the validation pairs:
    # measured at tiny (2 threads, idle), the whole step takes 19.2 s, 23.8 s when the pass scored every pair.
    reference_file = training.out / REFERENCE_LOGPS
    if training.is_main and load_reference_logps(reference_file, training.identity) is None:
        reference_model, _ = load_model(sft.model_dir)
        visited = batches.items_of_first_steps(steps)
        with autocast:
            scored = {"train": reference_pass(reference_model, train, visited, config.reference_batch_size)}
            if valid[0]:
                scored["valid"] = pair_logprobs(reference_model, *valid, batch_size=config.reference_batch_size)
        save_reference_logps(reference_file, training.identity, scored)
    barrier()
    reference = load_reference_logps(reference_file, training.identity)

    # --- training loop (resumes from the newest checkpoint of the output folder, if any) ---
    state = training.resume(model, optimizer, scheduler, batches, tokenizer)
    # a few fixed pairs followed step by step (rank 0 keeps them in watch.jsonl, for the browser)
    probes = DPOProbes(train, valid, reference, tokenizer, config.beta)
    if state.step == 0:
        training.keep(0, "dpo_probes", pairs=probes.pairs)
    for step in range(state.step + 1, training.steps + 1):  # the planned steps, or where --patience ended a run
        micro_batches = batches.next_step()  # this rank's micro-batches: lists of pair indices
        # The loss is the mean over the pairs of the global batch: each micro-batch's mean weighs its pairs x
        # world size / the step's pairs on all ranks (distributed.sum_over_ranks shows why), which is
        # 1/grad_accum_steps when every micro-batch holds as many.
        pairs_per_rank = sum_over_ranks(sum(len(ids) for ids in micro_batches)) / training.info.world_size
        step_loss, step_nll, policy_logps, step_tokens = torch.zeros(()), torch.zeros(()), [], 0
        for index, ids in enumerate(micro_batches):
            prompts, chosen, rejected = ([sequences[i] for i in ids] for sequences in train)
            # DDP all-reduces the gradients during the last micro-batch's backward() only (no_sync on the others).
            with gradient_sync(ddp, last=index == len(micro_batches) - 1), autocast:
                # Both answers of every pair in one forward, [chosen of each pair..., rejected of each pair...]
                # (TRL's `concatenated_forward`): log pi(y|x), summed over each answer's tokens.
                policy = completion_logprobs(forward, prompts * 2, chosen + rejected, batch_size=2 * len(ids))
                policy_chosen, policy_rejected = policy[: len(ids)], policy[len(ids):]
                reference_chosen, reference_rejected = scored_reference(reference["train"], ids, policy.device)
                # DPO's loss, the equation of the module docstring: h is the policy's log-ratio to the reference
                # on the chosen answer minus that on the rejected one; -log sigmoid(beta * h) (logsigmoid, not
                # log of sigmoid: finite however far apart the answers are).
                h = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
                if config.loss_variant == "sigmoid":
                    loss = (-F.logsigmoid(config.beta * h)).mean()
                else:  # cDPO's soft label or IPO's squared loss (training.dpo.dpo_loss says what each is)
                    loss = preference_losses(h, config.beta, config.loss_variant, config.label_smoothing).mean()
                if config.sft_weight:  # RPO: plus the chosen answers' mean NLL per token
                    lengths = torch.tensor([len(c) for c in chosen], dtype=policy.dtype, device=policy.device)
                    nll = (-policy_chosen / lengths).mean()
                    loss = loss + config.sft_weight * nll
                    step_nll += nll.detach().cpu() * (len(ids) / pairs_per_rank)
                loss = loss * (len(ids) / pairs_per_rank)
            loss.backward()
            step_loss += loss.detach().cpu()
            policy_logps.append((ids, policy_chosen.detach(), policy_rejected.detach()))
            step_tokens += sum(2 * len(p) + len(c) + len(r) for p, c, r in zip(prompts, chosen, rejected, strict=True))
        # The update, as in SFT: AdamW at this step's rate after clipping the gradient's global norm (the norm
        # before clipping is logged), then the schedule's next rate, and the gradients cleared for the next step.
        lr = scheduler.get_last_lr()[0]
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip or math.inf)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

        # Bookkeeping: the step's loss, reward accuracy and margin, and policy log-probs, averaged over all ranks.
        numbers = dpo_step_metrics(step_loss, policy_logps, reference["train"], config.beta)
        if config.sft_weight:  # the NLL term alone, as TRL logs it (nll_loss): loss = preference + weight x this
            numbers["nll_loss"] = all_reduce_mean(step_nll.double()).item()
        validation = None
        if "valid" in reference and training.is_due(step, config.eval_every) and training.is_main:
            # Rank 0 only, on the unwrapped model: no collective inside, the other ranks simply wait at
            # the next gradient all-reduce.
            with autocast:
                validation = dpo_validation(model, valid, reference["valid"], config.beta, config.loss_variant,
                                            config.label_smoothing, config.reference_batch_size)
        if training.is_main and training.is_due(step, config.watch_every):  # the probe pairs, as validation: rank 0
            with autocast:
                training.keep(step, "dpo", pairs=probes.record(model))
        tokens = round(sum_over_ranks(step_tokens))
        training.record(step, **numbers, lr=lr, grad_norm=grad_norm.item(), tokens=tokens, validation=validation)
        if (last := training.patience_ends_run(step, validation)) is not None:  # --patience: end the run early,
            anneal(scheduler, step, last)  # the rate decaying to its floor at the run's new last step
        training.checkpoint_if_due(step)
        if step == training.steps:  # --patience ended the run here
            break

    # --- the model folder and the artifact ---
    return training.finish(DPOCheckpoint, metrics={
        "train_pairs": len(train[0]),
        "validation_pairs": len(valid[0]),
        "beta": config.beta,
    })


if __name__ == "__main__":
    run(main)
