"""What packing costs and what it changes in SFT: packed rows vs one conversation per batch row.

The nano2 SFT step trains packed rows (several chats per row) with block-diagonal attention but
without resetting the Mamba-2 state between chats (transformers' CPU scan cannot). This script runs
the real SFT step three times on the same data and steps:

    packed             --layout packed (the default): rows as stored
    packed (seed 1)    the same with another row order: the noise scale of the comparison
    per_conversation   --layout per_conversation: every chat alone in its batch row (exact, padded)

and prints, for each trained model, the validation loss scored both ways (alone = how a chat is seen
at inference, packed = with the carried-over state) and the carry-over gap; then the time of a
forward + backward on the same randomly drawn micro-batches in both layouts, interleaved, as a ratio.

    python benchmarks/bench_sft_packing.py                       # tiny inputs with an untrained base
    python benchmarks/bench_sft_packing.py --dataset-path runs/nano2/stage1_sft/data_curation
    python benchmarks/bench_sft_packing.py --quick                # 2 steps per run, 1 speed round

Measured (2 busy CPU cores, tiny, 60 steps, SFT data curated from a tiny base pretrained 400 steps on
Shakespeare): carry-over gap +3.5e-5 relative; valid loss packed-trained minus per-conversation-trained
+0.0016 vs +0.0199 between the two packed seeds; a per-conversation step takes 3.0x as long.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.packing import read_packed
from nemotron.data_prep.sources import read_chatterbot
from nemotron.data_prep.tokenizer import PAD_ID, load_tokenizer, train_tokenizer
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint
from nemotron.recipes.nano2.stage1_sft import data_curation, training
from nemotron.training.packed_batches import (
    collate_packed,
    collate_per_conversation,
    masked_token_loss,
    validation_loss,
)

VARIANTS = (("packed", "packed", 0), ("packed (seed 1)", "packed", 1), ("per_conversation", "per_conversation", 0))


def untrained_base(root: Path) -> PretrainCheckpoint:
    """A stand-in stage-0 checkpoint: a 1,024-token chat tokenizer trained on the chatterbot texts and an
    untrained tiny nano2 (the comparison is between layouts, so the base needs no pretraining)."""
    model_dir = root / "model"
    conversations, _ = read_chatterbot()
    texts = ["\n".join(m["content"] for m in c["messages"]) for c in conversations]
    train_tokenizer(texts, 1024, model_dir, chat_template=NANO2_CHAT_TEMPLATE)
    build_model(build_config("tiny", len(load_tokenizer(model_dir))), seed=0).save_pretrained(str(model_dir))
    (root / "metrics.jsonl").write_text('{"loss": 6.0, "step": 1}\n')
    return PretrainCheckpoint(path=root, scale="tiny", model_dir=model_dir, metrics_path=root / "metrics.jsonl",
                              training_loss=6.0, validation_loss=None, steps=1).save()


def tiny_inputs(root: Path) -> Path:
    """An untrained tiny base, then the real stage-1 data curation."""
    base = untrained_base(root / "stage0")
    return data_curation.main(data_curation.Config(checkpoint_path=base.path, output_dir=root / "data")).path


def step_seconds(model_dir: Path, rows: list, collate, rounds: int) -> list[float]:
    """Forward + backward times of micro-batches of 4 rows (the step's default) drawn like training's.

    Rows are drawn at random (seeded, the same for both layouts): first-fit-decreasing stores the
    longest conversations first, so the first rows alone would flatter the per-conversation layout.
    """
    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    draws = random.Random(0)
    times = []
    for _ in range(rounds):
        batch = collate(draws.sample(rows, 4), PAD_ID)
        start = time.perf_counter()
        masked_token_loss(model(**batch.model_inputs(), use_cache=False).logits, batch).backward()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset-path", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=None, help="default: the step's tiny default")
    parser.add_argument("--speed-rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 steps per run, 1 speed round: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.speed_rounds = 2, 1
    hf_logging.set_verbosity_error()

    with tempfile.TemporaryDirectory() as temp:
        root = Path(temp)
        dataset = training.SFTDataset.from_path(args.dataset_path or tiny_inputs(root))
        rows = read_packed(dataset.valid_packed)
        results = {}
        # The second packed run (another seed, so another row order) is the noise yardstick.
        for name, layout, seed in VARIANTS:
            config = training.Config(dataset_path=dataset.path, output_dir=root / name, layout=layout,
                                     seed=seed, steps=args.steps, scale=dataset.scale)
            checkpoint = training.main(config)
            model = AutoModelForCausalLM.from_pretrained(checkpoint.model_dir)
            results[name] = {
                "alone": validation_loss(model, rows, PAD_ID, collate_per_conversation),
                "packed": validation_loss(model, rows, PAD_ID, collate_packed),
            }

        # Speed, measured interleaved on the same rows so a busy machine slows both alike.
        train_rows = read_packed(dataset.train_packed)
        speed = {"packed": [], "per_conversation": []}
        for _ in range(args.speed_rounds):
            for layout, collate in (("packed", collate_packed), ("per_conversation", collate_per_conversation)):
                speed[layout] += step_seconds(checkpoint.model_dir, train_rows, collate, rounds=5)

    print(f"{'trained with':<24}{'val alone':>11}{'val packed':>12}{'gap':>10}")
    for name, r in results.items():
        print(f"{name:<24}{r['alone']:>11.4f}{r['packed']:>12.4f}{r['packed'] - r['alone']:>+10.5f}")
    packed, noise, exact = (results[name] for name, _, _ in VARIANTS)
    ratio = statistics.median(speed["per_conversation"]) / statistics.median(speed["packed"])
    print(f"step time, per_conversation / packed:        {ratio:.2f}x (interleaved, median of {len(speed['packed'])})")
    print(f"val (alone), packed - per_conversation:      {packed['alone'] - exact['alone']:+.4f}")
    print(f"val (alone), packed seed 0 - seed 1 (noise): {packed['alone'] - noise['alone']:+.4f}")
    gap = (packed["packed"] - packed["alone"]) / packed["alone"]
    print(f"carry-over gap of the packed-trained model:  {gap:+.1e} relative")


if __name__ == "__main__":
    main()
