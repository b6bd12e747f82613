"""Does training on the NLL-selected pool beat training on a random pool of the same size?

The post-training data pipeline scores every candidate record by completion NLL under a reference model
and keeps some per pool (`nemotron.recipes.post_training_data.score`). This script trains a tiny nano3
model by SFT on that selection and, beside it, on a random pool of the same token count drawn from the
same candidates, and compares them on the same held-out records:

- candidates: the records of the ScoredSelection's CandidatePools; held out: a seeded `--held-out` share
  of the candidates the selection did NOT keep (so neither arm trains on them, and the same for all runs);
  the random pool: seeded records of the other candidates, added until it has the selection's tokens;
- every record in the nano3 template with its reasoning and tool calls, masked by its `loss_mode`
  (`nemotron.data_prep.chat.records`), packed into `--pack-size` rows as stage-1 SFT packs them;
- per seed (`--seeds`, default 3): the same freshly initialised tiny nano3 MoE (seeded) trained `--steps`
  AdamW steps on each pool, with the load-balancing loss of stage-1 SFT; the tokenizer is a BPE trained once
  on all candidates (the demo has no pretrained nano3 model to start from: this is SFT from scratch);
- held-out completion NLL (nats per target token, `assistant_all` targets) and answer accuracy (share of
  held-out records whose whole final answer is the model's greedy next-token choice under teacher forcing);
  mean and standard error over the seeds, and the SFT throughput on each pool (tokens/s).

The last line is the figure: held-out NLL of the selected pool minus the random one, mean +- standard error
(negative = the selection helps).

Without `--scored-path` the script first makes its own ScoredSelection in a temporary folder by running
the post-training data steps (normalize -> pools -> score, as `python -m nemotron.recipes.post_training_data
--scale tiny` runs them) on the demo records shipped with the package: scored by SmolLM2-135M (minutes), or
in `--quick` by a seeded, randomly initialised tiny Llama (`tiny_reference_model`), so that `--quick` runs
from a fresh clone in seconds through the same code.

    python -m nemotron.recipes.post_training_data --scale tiny      # makes runs/post_training_data/score
    python benchmarks/bench_selection.py [--scored-path runs/post_training_data/score] [--steps 30] [--seeds 3]
    python benchmarks/bench_selection.py --quick                   # 3 seeds x 2 steps of 128 tokens: seconds
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from nemotron.cpu import torch_threads
from nemotron.data_prep.chat.nano3 import NANO3_CHAT_TEMPLATE, render_nano3
from nemotron.data_prep.chat.records import record_to_nano3, tokenize_nano3_record
from nemotron.data_prep.packing import PackingConfig, pack_conversations
from nemotron.data_prep.post_training.schema import read_records
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError
from nemotron.models import nano3
from nemotron.models.loading import quiet_cuda_kernel_notes
from nemotron.models.reference import SMOLLM2, random_reference_model
from nemotron.recipes.post_training_data import normalize, pools, score
from nemotron.recipes.post_training_data.artifacts import CandidatePools, ScoredSelection
from nemotron.training.moe import ExpertBalance
from nemotron.training.optim import build_optimizer


def tiny_reference_model(candidates: CandidatePools, folder: Path) -> Path:
    """`models.reference.random_reference_model` on the candidates' text: noise scores, so that `--quick`
    walks the real score step in seconds instead of loading SmolLM2-135M for minutes."""
    texts = [r["text"] for files in pools.pool_files(candidates.pools_dir).values() for r in read_records(files)]
    return random_reference_model(texts, folder)


def make_scored_selection(folder: Path, quick: bool) -> Path:
    """Run the post-training data steps normalize -> pools -> score on the shipped demo records into `folder`.

    The configs are the steps' defaults at `--scale tiny`, seed 0, as the recipe's orchestrator sets them, so
    the full mode selects what `python -m nemotron.recipes.post_training_data --scale tiny` selects; `quick`
    only swaps the reference model for `tiny_reference_model`. Returns the ScoredSelection's folder.
    """
    dataset = normalize.main(normalize.Config(output_dir=folder / "normalize"))
    candidates = pools.main(pools.Config(dataset_path=dataset.path, output_dir=folder / "pools"))
    reference = str(tiny_reference_model(candidates, folder / "reference")) if quick else SMOLLM2
    scored = score.main(score.Config(pools_path=candidates.path, reference_model=reference,
                                     output_dir=folder / "score"))
    return scored.path


def load_pools(scored_path: Path) -> tuple[list[dict], set[str]]:
    """(every candidate record, the ids the NLL selection kept)."""
    if not (Path(scored_path) / "metadata.json").is_file():
        raise NemotronError(f"{scored_path}: no ScoredSelection; make one with `python -m "
                            "nemotron.recipes.post_training_data --scale tiny` (runs/post_training_data/score)")
    scored = ScoredSelection.from_path(scored_path)
    made = CandidatePools.from_path(next(ref.path for ref in scored.inputs if ref.type == CandidatePools.type_name()))
    candidates = {r["id"]: r for r in read_records(sorted(Path(made.pools_dir).rglob("*.parquet")))}
    selected = {r["id"] for r in read_records(scored.selected_path)}
    return [candidates[i] for i in sorted(candidates)], selected


def split_arms(candidates, selected, tokens_of, held_out_share: float) -> tuple[list, list, list]:
    """(held-out, selected pool, random pool of the same token count), all seeded by 0."""
    rng = random.Random(0)
    others = [r for r in candidates if r["id"] not in selected]
    held_out = rng.sample(others, max(1, round(len(others) * held_out_share)))
    held = {r["id"] for r in held_out}
    chosen = [r for r in candidates if r["id"] in selected]
    budget = sum(tokens_of[r["id"]] for r in chosen)
    pool, tokens = [r for r in candidates if r["id"] not in held], 0
    rng.shuffle(pool)
    random_pool = []
    for record in pool:
        if tokens >= budget:
            break
        random_pool.append(record)
        tokens += tokens_of[record["id"]]
    return held_out, chosen, random_pool


def train(rows, vocab_size: int, seed: int, steps: int, batch: int, lr: float) -> tuple[torch.nn.Module, float]:
    """A fresh tiny nano3 MoE trained on the packed rows; returns it and its SFT tokens per second."""
    config = nano3.build_config("tiny", vocab_size)
    model = nano3.build_model(config, seed=seed)
    balance = ExpertBalance(model, config.num_experts_per_tok, nano3.AUX_LOSS_COEFF, nano3.BIAS_UPDATE_RATE)
    optimizer = build_optimizer(model, lr=lr)
    order = random.Random(seed)
    started, tokens = time.perf_counter(), 0
    for _ in range(steps):
        picked = [rows[order.randrange(len(rows))] for _ in range(batch)]
        width = max(len(row.input_ids) for row in picked)  # rows are at most pack_size; pad, untrained
        ids = torch.zeros(len(picked), width, dtype=torch.long)
        weights = torch.zeros(len(picked), width)
        for i, row in enumerate(picked):
            ids[i, : len(row.input_ids)] = torch.as_tensor(row.input_ids, dtype=torch.long)
            weights[i, : len(row.loss_mask)] = torch.as_tensor(row.loss_mask, dtype=torch.float)
        weights = weights[:, :-1]
        with balance.recording() as routings:
            logits = model(input_ids=ids[:, :-1], use_cache=False).logits
        losses = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (losses * weights).sum() / weights.sum().clamp(min=1) + balance.loss(routings, len(picked))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        balance.after_step()
        tokens += ids.numel()
    return model, tokens / (time.perf_counter() - started)


@torch.no_grad()
def evaluate(model, held_out: list[tuple[list[int], list[int], list[int]]]) -> tuple[float, float]:
    """(completion NLL per target token, answer accuracy) over (ids, assistant_all mask, final mask)."""
    model.eval()
    nll, targets, right = 0.0, 0, 0
    for ids, mask, final in held_out:
        x = torch.tensor([ids], dtype=torch.long)
        logits = model(input_ids=x[:, :-1], use_cache=False).logits[0]
        labels = x[0, 1:]
        losses = F.cross_entropy(logits, labels, reduction="none")
        m, f = torch.tensor(mask[1:], dtype=torch.bool), torch.tensor(final[1:], dtype=torch.bool)
        nll += float(losses[m].sum())
        targets += int(m.sum())
        right += bool((logits.argmax(-1)[f] == labels[f]).all())
    model.train()
    return nll / max(targets, 1), right / len(held_out)


def mean_se(values: list[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return statistics.fmean(values), se


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scored-path", type=Path, default=None,
                        help="a ScoredSelection folder; default: make one from the demo records in a temp folder")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--pack-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--held-out", type=float, default=0.5, help="share of the unselected candidates held out")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--num-threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true", help="2 steps of one 128-token row per run: seconds")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.batch, args.pack_size = 2, 1, 128
    steps = args.steps
    quiet_cuda_kernel_notes()
    torch.set_num_threads(torch_threads(args.num_threads))

    with tempfile.TemporaryDirectory() as folder:
        candidates, selected = load_pools(args.scored_path or make_scored_selection(Path(folder), args.quick))
    conversations = {r["id"]: record_to_nano3(r) for r in candidates}  # the demo's candidates all convert
    with tempfile.TemporaryDirectory() as folder:
        corpus = [render_nano3(c["messages"]) for c in conversations.values()]
        train_tokenizer(corpus, args.vocab_size, Path(folder) / "tok", chat_template=NANO3_CHAT_TEMPLATE)
        tokenizer = load_tokenizer(Path(folder) / "tok")
    tokenized = {i: tokenize_nano3_record(tokenizer, c) for i, c in conversations.items()}
    tokens_of = {i: len(ids) for i, (ids, _) in tokenized.items()}
    held_out, chosen, random_pool = split_arms(candidates, selected, tokens_of, args.held_out)
    evaluation = [(*tokenized[r["id"]], tokenize_nano3_record(tokenizer, {**conversations[r["id"]],
                                                                          "loss_mode": "final_only"})[1])
                  for r in held_out]
    packing = PackingConfig(pack_size=args.pack_size, seed=0)
    arms = {}
    for name, pool in (("selected", chosen), ("random", random_pool)):
        rows, stats = pack_conversations([tokenized[r["id"]] for r in pool], packing, show_progress=False)
        arms[name] = {"rows": rows, "records": len(pool), "tokens": sum(tokens_of[r["id"]] for r in pool),
                      "truncated": stats.truncated, "nll": [], "accuracy": [], "tokens_per_second": []}
    print(f"{len(candidates)} candidates, {len(selected)} NLL-selected; held out {len(held_out)} unselected; "
          f"{steps} steps x batch {args.batch} x {args.pack_size} tokens per run, {args.seeds} seeds, "
          f"threads {torch.get_num_threads()}", file=sys.stderr)
    for seed in range(args.seeds):
        for arm in arms.values():
            model, speed = train(arm["rows"], len(tokenizer), seed, steps, args.batch, args.lr)
            nll, accuracy = evaluate(model, evaluation)
            arm["nll"].append(nll)
            arm["accuracy"].append(accuracy)
            arm["tokens_per_second"].append(speed)

    print("| pool | records | tokens | truncated | held-out NLL (nats/token) | answer accuracy | SFT tokens/s |")
    print("|---|---|---|---|---|---|---|")
    for name, arm in arms.items():
        (nll, nll_se), (acc, acc_se) = mean_se(arm["nll"]), mean_se(arm["accuracy"])
        print(f"| {name} | {arm['records']} | {arm['tokens']} | {arm['truncated']} | {nll:.3f} +- {nll_se:.3f} | "
              f"{acc:.2f} +- {acc_se:.2f} | {statistics.fmean(arm['tokens_per_second']):,.0f} |")
    gap, gap_se = mean_se([s - r for s, r in zip(arms["selected"]["nll"], arms["random"]["nll"], strict=True)])
    print(f"held-out NLL, selected - random: {gap:+.3f} +- {gap_se:.3f} nats/token over {args.seeds} seeds "
          f"({len(held_out)} held-out records)")


if __name__ == "__main__":
    main()
