"""Why hybrid? nano2 tiny against a plain transformer of the same width and depth, for the same CPU time.

Both models train on the same pretraining windows in the same seeded order (the stage-0 dataset of
`--dataset-path`, or one curated here from all of Shakespeare), with the same AdamW and a
warmup-stable-decay schedule laid out in time (`train_for`), for `--seconds` of wall-clock time each,
one after the other in this process with the same thread count; then both are scored on the same
held-out windows:

- hybrid: nano2 tiny (`nemotron.models.nano2`, pattern M-*-: Mamba-2, MLP, attention, MLP), its Mamba-2
  layers on the recipe's own chunked scan (`use_training_scan`), as stage 0 trains it;
- transformer: the Llama block nanoGPT-style recipes train (attention + MLP per layer, RoPE, RMSNorm),
  2 layers of the same width, MLP size, heads and vocabulary: the same 4 sub-layers, all attention.

The table prints steps, seconds trained, tokens/s and held-out loss (nats per token) side by side, and
the loss ratio. Run it on an otherwise idle machine: each model gets the same wall-clock time.

    python benchmarks/bench_hybrid_vs_transformer.py                     # 120 s each
    python benchmarks/bench_hybrid_vs_transformer.py --seconds 60 \
        --dataset-path runs/nano2/stage0_pretrain/data_curation
    python benchmarks/bench_hybrid_vs_transformer.py --quick     # 1 s each on one play (Macbeth), vocab 1024
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

from nemotron.cpu import torch_threads
from nemotron.models.mamba2 import use_training_scan
from nemotron.models.nano2 import SCALES, build_config, build_model, count_parameters
from nemotron.recipes.nano2.artifacts import PretrainDataset
from nemotron.training.optim import build_optimizer
from nemotron.training.run import seed_everything
from nemotron.training.windows import TokenWindows, windows_loss

SEQ_LEN, BATCH, LR, WARMUP = 256, 8, 3e-3, 30


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


def one_play_blend(folder: Path) -> Path:
    """A blend of Macbeth's scenes alone (--quick)."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") == "macbeth"]
    (folder / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (folder / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": [0.9, 0.1, 0]}))
    return folder / "blend.json"


def train_for(model, train: TokenWindows, seconds: float) -> tuple[int, float, float]:
    """Train for `seconds` of wall-clock time with warmup-stable-decay by the clock: a linear warmup over
    the first WARMUP steps, the peak rate until 80% of the time has passed, then a linear decay to a tenth
    over as many steps as the last 20% holds at the rate measured so far. Both models get the same
    schedule shape in time, whatever their speed, and no step count guessed from a short warm-up (that
    guess was off by up to 1.5x on a shared machine). Returns (steps, tokens/s, seconds trained)."""
    optimizer = build_optimizer(model, lr=LR)

    def step(lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr
        batch = train.next_batch()
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started, steps = time.perf_counter(), 0
    while time.perf_counter() - started < 0.8 * seconds:
        steps += 1
        step(LR * min(1.0, steps / WARMUP))
    decay = max(1, round(steps / 4))  # the last 20% of the time at the rate of the first 80%
    for index in range(1, decay + 1):
        step(LR * (1 - 0.9 * index / decay))
    elapsed = time.perf_counter() - started
    return steps + decay, (steps + decay) * train.tokens_per_batch / elapsed, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--dataset-path", type=Path)
    parser.add_argument("--num-threads", type=int)
    parser.add_argument("--quick", action="store_true", help="1 s each on one play, vocab 1024: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.seconds = 1.0
    with tempfile.TemporaryDirectory() as tmp:
        path = args.dataset_path
        if path is None:
            path = Path(tmp) / "data"
            blend = ["--blend-path", str(one_play_blend(Path(tmp))), "--vocab-size", "1024"] if args.quick else []
            subprocess.run([sys.executable, "-m", "nemotron.recipes.nano2.stage0_pretrain.data_curation",
                            "--output-dir", str(path), *blend], check=True, capture_output=True)
        dataset = PretrainDataset.from_path(path)
        threads = torch_threads(args.num_threads)
        torch.set_num_threads(threads)
        valid = TokenWindows(dataset.valid_prefixes, SEQ_LEN, 1, seed=0)
        valid_ids = range(min(valid.num_windows, 64))
        rows = []
        for name, build in (("hybrid (nano2 tiny, M-*-)",
                                # as the recipe trains it: its Mamba-2 layers on our chunked scan
                                lambda v: use_training_scan(build_model(build_config("tiny", v), seed=0))),
                            ("transformer (Llama, 2 layers)", transformer)):
            seed_everything(0)
            model = build(dataset.vocab_size).train()
            train = TokenWindows(dataset.train_prefixes, SEQ_LEN, BATCH, seed=0)
            steps, speed, elapsed = train_for(model, train, args.seconds)
            loss = windows_loss(model, valid, valid_ids, BATCH)
            rows.append((name, count_parameters(model), steps, elapsed, speed, loss))
    print(f"{args.seconds:.0f} s of training each, {threads} threads, batch {BATCH} x {SEQ_LEN} tokens, lr {LR}")
    print(f"{'model':<32} {'params':>9} {'steps':>6} {'seconds':>8} {'tokens/s':>9} {'held-out loss':>14} "
          f"{'bits/token':>10}")
    for name, params, steps, elapsed, speed, loss in rows:
        print(f"{name:<32} {params / 1e6:>8.2f}M {steps:>6} {elapsed:>8.1f} {speed:>9,.0f} {loss:>14.3f} "
              f"{loss / math.log(2):>10.3f}")
    print(f"transformer / hybrid held-out loss: {rows[1][5] / rows[0][5]:.3f}")


if __name__ == "__main__":
    main()
