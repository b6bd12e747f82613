"""Why hybrid? nano2 tiny against a plain transformer of the same width and depth, for the same CPU time.

Both models train on the same pretraining windows in the same seeded order (the stage-0 dataset of
`--dataset-path`, or one curated here from all of Shakespeare), with the same AdamW and warmup-cosine
schedule, for `--seconds` of CPU time each, one after the other in this process with the same thread
count; then both are scored on the same held-out windows:

- hybrid: nano2 tiny (`nemotron.models.nano2`, pattern M-*-: Mamba-2, MLP, attention, MLP);
- transformer: the Llama block nanoGPT-style recipes train (attention + MLP per layer, RoPE, RMSNorm),
  2 layers of the same width, MLP size, heads and vocabulary: the same 4 sub-layers, all attention.

Steps per model are set from a timed warm-up so each gets its share of CPU time; the table prints
steps, tokens/s and held-out loss (nats per token) side by side, and the loss ratio.

    python benchmarks/bench_hybrid_vs_transformer.py                     # 120 s each
    python benchmarks/bench_hybrid_vs_transformer.py --seconds 60 --dataset-path runs/nano2/stage0_pretrain/data_curation
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from nemotron.models.nano2 import SCALES, build_config, build_model, count_parameters
from nemotron.recipes.nano2.artifacts import PretrainDataset
from nemotron.training.compute import seed_everything, torch_threads
from nemotron.training.optim import build_optimizer, warmup_cosine
from nemotron.training.windows import TokenWindows, windows_loss

SEQ_LEN, BATCH, LR = 256, 8, 3e-3


def transformer(vocab_size: int) -> LlamaForCausalLM:
    tiny = SCALES["tiny"]
    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=tiny["hidden_size"], intermediate_size=tiny["intermediate_size"],
        num_hidden_layers=2, num_attention_heads=tiny["num_attention_heads"],
        num_key_value_heads=tiny["num_key_value_heads"], head_dim=tiny["head_dim"],
        max_position_embeddings=tiny["max_position_embeddings"], tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def train_for(model, train: TokenWindows, seconds: float) -> tuple[int, float]:
    """Train for about `seconds`: time 5 steps, set the schedule's length from them, run it."""
    optimizer = build_optimizer(model, lr=LR)

    def step(scheduler=None) -> None:
        batch = train.next_batch()
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if scheduler:
            scheduler.step()

    started = time.perf_counter()
    for group in optimizer.param_groups:
        group["lr"] = LR / 10  # warm-up steps at a tenth of the rate
    for _ in range(5):
        step()
    per_step = (time.perf_counter() - started) / 5
    steps = max(10, int(seconds / per_step) - 5)
    scheduler = warmup_cosine(optimizer, steps // 10, steps, 0.1)
    for _ in range(steps):
        step(scheduler)
    elapsed = time.perf_counter() - started
    return steps + 5, (steps + 5) * train.tokens_per_batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--dataset-path", type=Path)
    parser.add_argument("--num-threads", type=int)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.dataset_path
        if path is None:
            path = Path(tmp) / "data"
            subprocess.run([sys.executable, "-m", "nemotron.recipes.nano2.stage0_pretrain.data_curation",
                            "--output-dir", str(path)], check=True, capture_output=True)
        dataset = PretrainDataset.from_path(path)
        threads = torch_threads(args.num_threads)
        torch.set_num_threads(threads)
        valid = TokenWindows(dataset.valid_prefixes, SEQ_LEN, 1, seed=0)
        valid_ids = range(min(valid.num_windows, 64))
        rows = []
        for name, build in (("hybrid (nano2 tiny, M-*-)", lambda v: build_model(build_config("tiny", v), seed=0)),
                            ("transformer (Llama, 2 layers)", transformer)):
            seed_everything(0)
            model = build(dataset.vocab_size).train()
            train = TokenWindows(dataset.train_prefixes, SEQ_LEN, BATCH, seed=0)
            steps, speed = train_for(model, train, args.seconds)
            loss = windows_loss(model, valid, valid_ids, BATCH)
            rows.append((name, count_parameters(model), steps, speed, loss))
    print(f"{args.seconds:.0f} s of training each, {threads} threads, batch {BATCH} x {SEQ_LEN} tokens, lr {LR}")
    print(f"{'model':<32} {'params':>9} {'steps':>6} {'tokens/s':>9} {'held-out loss':>14} {'bits/token':>10}")
    for name, params, steps, speed, loss in rows:
        print(f"{name:<32} {params / 1e6:>8.2f}M {steps:>6} {speed:>9,.0f} {loss:>14.3f} {loss / math.log(2):>10.3f}")
    print(f"transformer / hybrid held-out loss: {rows[1][4] / rows[0][4]:.3f}")


if __name__ == "__main__":
    main()
