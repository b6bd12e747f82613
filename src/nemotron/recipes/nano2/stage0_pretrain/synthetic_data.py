"""Stage 0, optional step: synthetic pretraining data by rephrasing seed documents with an LLM endpoint.

Nemotron-CC (Su et al. 2024) and BeyondWeb (2025) showed that rephrasing good documents into other
forms (Wikipedia-style prose, question-answer sets, distilled summaries, extracted knowledge) makes
better pretraining data than the raw text alone. This step does it against any OpenAI-compatible
endpoint: our local server on a CPU (`python -m nemotron.serve`), or vLLM, SGLang, NIM or a
hosted API at scale (`--endpoint.url`, `--endpoint.model`, `--endpoint.api-key-env`).

1. setup: seed documents (train split only) and their statistics; the strategies, whose templates
   are checked against the seed columns; the endpoint's health check and a test request. Every one
   of these fails in one line before any generation request.
2. work: optional `--preview N` (records beside their originals on stderr); every (document,
   strategy) request with at most `--endpoint.max-parallel-requests` in flight, appended to a JSONL
   file as answers arrive (an interrupted run resumes; `nemotron.sdg.client.run_jobs`); the judge
   scores each rephrase with a rubric as structured output; the throughput of the endpoint,
   sequential vs concurrent.
3. finalize: synthetic.parquet (what the stage-0 blend reads), bill.json (tokens, FLOPs, GPU-hours,
   memory, 10x-1000x projections; also printed as a table), and a `SyntheticDataset` whose lineage
   names the seed files and the model.

Records whose structured answer stays invalid after the retries are counted (`failed_records`) and
left out; a re-run asks for them again. An endpoint that stays unreachable stops the run with one
line naming the URL (what was written is kept).

    python -m nemotron.serve --port 8000 &
    python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_data --strategies wikipedia_rephrase diverse_qa
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import ArtifactRef, apply_scale, mark_unfinished, source_ref
from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import SyntheticDataset
from nemotron.sdg import cost
from nemotron.sdg.client import Client, Endpoint, measure_throughput
from nemotron.sdg.rephrase import Rephraser, judge, tokens_by_strategy, write_parquet
from nemotron.sdg.seed import format_stats, load_seed, seed_stats
from nemotron.sdg.strategies import load_template_dir, select

FULL_DOCUMENTS = 400  # seed documents at full scale: tiny 4, small 40 (a CPU server writes ~5 tokens/s)
# Stated peak of the machine the local server runs on, for the effective MFU: 2 cores x 2.0 GHz x 32
# fp32 FLOPs per cycle (two 8-wide AVX2 FMA units). Pass your own with --peak-flops.
CPU_PEAK_FLOPS = 2 * 2.0e9 * 32


@dataclass
class Config:
    """Rephrase seed documents into synthetic pretraining data through an OpenAI-compatible endpoint."""

    strategies: tuple[str, ...] = ("wikipedia_rephrase", "diverse_qa")
    """Rephrasing strategies (wikipedia_rephrase, diverse_qa, distill, extract_knowledge, knowledge_list, or yours)."""
    seed_source: str = "shakespeare"
    """`shakespeare` (scenes) or a JSONL file / folder in NeMo Curator's shape (id, text, title, url, categories)."""
    num_documents: int | None = None
    """Seed documents to rephrase; default per scale (tiny 4, small 40, medium 120, full 400)."""
    template_dir: Path | None = None
    """A folder of <name>.jinja templates: extra free-text strategies over the seed columns."""
    max_seed_chars: int = 1500
    """Each seed text is cut to this many characters in the prompt (and for the judge)."""
    endpoint: Endpoint = field(default_factory=Endpoint)
    """The rephrasing model's endpoint (URL, model, API key variable, max tokens, concurrency, retries)."""
    max_field_chars: int = 300
    """Every string of a structured answer (a QA question, answer or choice, a judge's reason) is capped
    at this many characters by the grammar: it keeps a small model's JSON inside max_tokens."""
    max_list_items: int | None = None
    """Cap on the items of every list of a structured answer (QA pairs: at least 3 stay required)."""
    judge: bool = True
    """Score each rephrase with the LLM judge (coherence, faithfulness, information density)."""
    judge_model: str | None = None
    """Served model id of the judge on the same endpoint; default: the rephraser itself."""
    judge_max_tokens: int = 160
    """Most tokens of one judgment."""
    preview: int = 0
    """Before the run, generate this many documents with every strategy and print them beside the originals."""
    measure_requests: int = 4
    """Requests in the throughput measurement (sequential, then concurrent); 0 skips it."""
    measure_max_tokens: int = 16
    """Completion tokens per measurement request."""
    peak_flops: float = CPU_PEAK_FLOPS
    """Stated peak FLOP/s of the serving machine, for the effective MFU of the measurement."""
    bill_mfu: float = cost.SERVING_MFU
    """MFU assumed for the GPU-hours of the compute bill."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/synthetic_data")
    """Where the Parquet, the bill, the resumable request files and the artifact go."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the number of seed documents."""
    seed: int = 0
    """Seeds the choice of seed documents."""


def main(config: Config) -> SyntheticDataset:
    started = time.perf_counter()
    # --- setup: seed data, strategies (templates checked), the endpoint checked: all before any request ---
    num_documents = config.num_documents or apply_scale(FULL_DOCUMENTS, config.scale)
    extra = load_template_dir(config.template_dir) if config.template_dir else None
    strategies = select(config.strategies, extra)  # a misspelled name is the first and only line
    records, seed_files = load_seed(config.seed_source, num_documents=num_documents, seed=config.seed)
    stats = seed_stats(records)
    print(format_stats(stats), file=sys.stderr)
    client = Client(config.endpoint)
    rephraser = Rephraser(client, strategies, records, max_seed_chars=config.max_seed_chars,
                          max_field_chars=config.max_field_chars, max_list_items=config.max_list_items,
                          where=config.seed_source)
    served = client.check()
    judge_client = Client(Endpoint(**{**asdict(config.endpoint), "model": config.judge_model or config.endpoint.model,
                                      "alias": "judge", "temperature": 0.0}))
    if config.judge and config.judge_model:
        judge_client.check()
    out = mark_unfinished(config.output_dir.resolve())

    # --- work: preview, generate (resumable), judge, measure ---
    rephraser.preview(config.preview, out / "work")
    generated = rephraser.create(out / "work")
    rows, judge_failed, judge_tokens = generated.rows, {}, None
    if config.judge and rows:
        rows, judge_failed, judge_tokens = judge(judge_client, rows, out / "work", max_chars=config.max_seed_chars,
                                   max_tokens=config.judge_max_tokens, max_field_chars=config.max_field_chars)
    throughput = measure(client, config, served) if config.measure_requests > 0 else {}

    # --- finalize: Parquet, bill, artifact ---
    write_parquet(rows, out / "synthetic.parquet")
    tokens = tokens_by_strategy(rows)
    if judge_tokens is not None:
        tokens["judge"] = judge_tokens  # judging is part of the cost of the data
    bill = cost.bill(tokens, len(records), mfu=config.bill_mfu)
    atomic.write_text(out / "bill.json", _json(bill))
    print(cost.format_bill(bill), file=sys.stderr)
    failed = {"rephrase": len(generated.failed), "judge": len(judge_failed)}
    print(f"synthetic_data: {len(rows)} records from {len(records)} documents x {len(strategies)} strategies; "
          f"failed: {failed}; empty answers dropped: {generated.empty}", file=sys.stderr)
    model = {"url": config.endpoint.url, "model": config.endpoint.model, "alias": config.endpoint.alias,
             "served": served.get("nemotron") or {}}
    return SyntheticDataset(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[*(source_ref(f) for f in seed_files), model_ref(model)],  # lineage: seed files and the model
        data_path=out / "synthetic.parquet",
        bill_path=out / "bill.json",
        strategies=[s.name for s in strategies],
        model=model,
        num_records=len(rows),
        metrics={
            "seed": stats,
            "records": len(rows),
            "records_by_strategy": {s.name: sum(r["strategy"] == s.name for r in rows) for s in strategies},
            "failed_records": failed,
            "failed_examples": [*list(generated.failed.items())[:3], *list(judge_failed.items())[:3]],
            "empty_answers_dropped": generated.empty,
            "requests_sent": generated.requested,
            "tokens": bill["strategies"]["total"]["tokens"],
            "throughput": throughput,
            "bill_total_gpu_hours": {name: bill["strategies"]["total"][name]["gpu_hours"]
                                     for name in bill["rephrasers"]},
            "wall_seconds": time.perf_counter() - started,
        },
    ).save()


def model_ref(model: dict) -> ArtifactRef:
    """Lineage for the model that wrote the data: its endpoint and, when the server says, its files' digests."""
    files = (model.get("served") or {}).get("files")
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest() if files else None
    return ArtifactRef(type="model", path=f"{model['url']}#{model['model']}", digest=digest)


def measure(client: Client, config: Config, served: dict) -> dict:
    """Sequential vs concurrent throughput of the endpoint, and the effective MFU it implies."""
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    n = config.measure_requests
    sequential = measure_throughput(client, messages, requests=n, concurrency=1, max_tokens=config.measure_max_tokens)
    concurrent = measure_throughput(client, messages, requests=n, concurrency=client.endpoint.max_parallel_requests,
                                    max_tokens=config.measure_max_tokens)
    speedup = concurrent["total_tokens_per_second"] / sequential["total_tokens_per_second"]
    result = {"sequential": sequential, "concurrent": concurrent, "speedup_tokens_per_second": speedup}
    params = (served.get("nemotron") or {}).get("parameters")
    if params:  # our server reports its parameter count; a dense model: every parameter is active
        result["active_params"] = params
        result["peak_flops"] = config.peak_flops
        for name in ("sequential", "concurrent"):
            result[f"effective_mfu_{name}"] = cost.effective_mfu(params, result[name]["total_tokens_per_second"],
                                                                 config.peak_flops)
    print(f"synthetic_data: throughput {n} requests: "
          f"sequential {sequential['decode_tokens_per_second']:.1f} decode tok/s, "
          f"{client.endpoint.max_parallel_requests} concurrent "
          f"{concurrent['decode_tokens_per_second']:.1f} decode tok/s "
          f"({result['speedup_tokens_per_second']:.2f}x)", file=sys.stderr)
    return result


def _json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    run(main)
