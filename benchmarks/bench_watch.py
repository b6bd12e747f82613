"""What keeping what a step did costs (nemotron.training.watch), against the step itself: DPO's probe pairs,
SFT's held-out chats.

A DPO step (recipes/nano2/stage2_alignment/training.py) is one forward and backward of the policy over the
chosen and rejected answers of `--micro-batch-size` pairs; every `--watch-every` steps the step also measures
its probe pairs (`DPOProbes.record`: one no-gradient forward over their answers). Both are timed here in
turn, on the same model and pairs, `--repeats` times (median, and the fastest of each), so the load of a
shared machine weighs on both alike. The share printed is the probe pass over `--watch-every` steps: what
keeping them adds to a step. The same for SFT: a step's forward and backward over `--micro-batch-size`
packed rows, against the per-token loss of the held-out chats (`token_losses`, kept at each validation:
every `--eval-every` steps). GRPO's share is in `benchmarks/bench_grpo_step.py` (its `watch` phase).

    python benchmarks/bench_watch.py --run runs/nano2       # a nano2 run: its SFT model, SFT rows and DPO pairs
    python benchmarks/bench_watch.py --quick                # no run: an untrained tiny nano2, chatterbot's chats
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from nemotron.cpu import torch_threads
from nemotron.data_prep.chat.nano2 import tokenize_conversation
from nemotron.data_prep.packing import PackingConfig, pack_conversations, read_packed
from nemotron.data_prep.preference import read_tokenized_pairs
from nemotron.data_prep.sources import read_chatterbot
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.models.loading import load_model
from nemotron.models.mamba2 import use_training_scan
from nemotron.models.reference import random_chat_model
from nemotron.recipes.nano2.artifacts import PreferenceDataset, SFTDataset
from nemotron.recipes.nano2.stage2_alignment.training import Config
from nemotron.training.logprobs import completion_logprobs, pair_logprobs
from nemotron.training.watch import DPOProbes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, help="a nano2 run folder (stage1_sft, stage2_alignment)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="no run: an untrained tiny nano2 on chatterbot's "
                        "chats (the same code path, for CI), 2 repeats")
    args = parser.parse_args()
    if args.quick == (args.run is not None):
        parser.error("give --run RUN or --quick")
    torch.set_num_threads(torch_threads(None))  # as the step sets them (nemotron.cpu)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, train, valid, sft_rows = run_inputs(args.run) if args.run else quick_inputs(Path(tmp))
        measure(model_dir, train, valid, sft_rows, 2 if args.quick else args.repeats)


def run_inputs(run: Path) -> tuple:
    """A nano2 run's SFT model, its DPO pairs (train, valid) and its packed SFT rows (train, valid)."""
    dataset = PreferenceDataset.from_path(run / "stage2_alignment" / "data_curation")
    sft = SFTDataset.from_path(run / "stage1_sft" / "data_curation")
    return (run / "stage1_sft" / "training" / "model",
            read_tokenized_pairs(dataset.train_tokens), read_tokenized_pairs(dataset.valid_tokens),
            (read_packed(sft.train_packed), read_packed(sft.valid_packed)))


def quick_inputs(folder: Path) -> tuple:
    """An untrained tiny nano2 (`random_chat_model`); pairs of chatterbot's first turns (chosen: the answer,
    rejected: the next conversation's) and its chats packed as SFT rows: the same shapes as a run's."""
    model_dir = random_chat_model(folder)
    tokenizer = load_tokenizer(model_dir)
    chats = [c["messages"][:2] for c in read_chatterbot()[0][:64] if len(c["messages"]) >= 2]
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = [encode(c[0]["content"]) for c in chats]
    answers = [encode(c[1]["content"]) for c in chats]
    pairs = (prompts, answers, answers[1:] + answers[:1])
    half = len(chats) // 2
    train, valid = (tuple(side[:half] for side in pairs), tuple(side[half:] for side in pairs))
    rows = pack_conversations([tokenize_conversation(tokenizer, c) for c in chats], PackingConfig(pack_size=256),
                              show_progress=False)[0]
    return model_dir, train, valid, (rows[: len(rows) // 2 or 1], rows[len(rows) // 2:] or rows)


def measure(model_dir: Path, train: tuple, valid: tuple, sft_rows: tuple, repeats: int) -> None:
    model = use_training_scan(load_model(model_dir)[0]).float().train()
    reference = {"train": pair_logprobs(model, *train), "valid": pair_logprobs(model, *valid)}
    config = Config()
    probes = DPOProbes(train, valid, reference, load_tokenizer(model_dir), config.beta)
    ids = list(range(config.micro_batch_size))
    prompts, chosen, rejected = ([side[i] for i in ids] for side in train)

    step, probe = [], []
    for repeat in range(repeats + 1):  # the first round warms up
        started = time.perf_counter()
        policy = completion_logprobs(model, prompts * 2, chosen + rejected, batch_size=2 * len(ids))
        policy.sum().backward()
        model.zero_grad(set_to_none=True)
        middle = time.perf_counter()
        probes.record(model)
        if repeat:
            step.append(middle - started)
            probe.append(time.perf_counter() - middle)
    step_s, probe_s = statistics.median(step), statistics.median(probe)
    sft_step, chats, sft_every = sft_timings(sft_rows, load_tokenizer(model_dir), model, repeats)
    fastest = min(probe) / min(step)  # the least disturbed by other work on the machine
    print(f"nano2 DPO, {config.micro_batch_size} pairs a step, {len(probes.pairs)} probe pairs, threads "
          f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}")
    print(f"| forward + backward of a step | {step_s:.3f} s |\n| probe pass | {probe_s:.3f} s |")
    print(f"kept every {config.watch_every} steps (--watch-every): {probe_s / config.watch_every / step_s:.1%} "
          f"of the step's forward and backward; every step: {probe_s / step_s:.0%} (medians; fastest of each: "
          f"{fastest:.0%})")
    print(f"| SFT: forward + backward of a step | {sft_step:.3f} s |")
    print(f"| held-out chats' per-token loss | {chats:.3f} s |")
    print(f"{chats / sft_every / sft_step:.1%} of the SFT step's forward and backward: the held-out chats' losses, "
          f"kept at each validation (every {sft_every} steps)")


def sft_timings(rows: tuple, tokenizer, model, repeats: int) -> tuple[float, float, int]:
    """(median seconds of an SFT step's forward and backward, of the held-out chats' per-token loss, the
    validation interval) on packed SFT rows (train, valid), the two in turn."""
    from nemotron.recipes.nano2.stage1_sft.training import Config as SFTConfig
    from nemotron.training.packed_batches import collate_packed, masked_token_loss
    from nemotron.training.watch import heldout_chats, token_losses

    train, valid = rows
    config = SFTConfig()
    batch = collate_packed(train[: config.micro_batch_size], tokenizer.pad_token_id)
    chats = heldout_chats(valid)
    step, kept = [], []
    for repeat in range(repeats + 1):
        started = time.perf_counter()
        masked_token_loss(model(**batch.model_inputs(), use_cache=False).logits, batch).backward()
        model.zero_grad(set_to_none=True)
        middle = time.perf_counter()
        token_losses(model, chats, tokenizer)
        if repeat:
            step.append(middle - started)
            kept.append(time.perf_counter() - middle)
    return statistics.median(step), statistics.median(kept), config.eval_every


if __name__ == "__main__":
    main()
