"""Stage 0, optional step: synthetic pretraining data by rephrasing seed documents with an LLM endpoint.

Nemotron-CC (Su et al. 2024) and BeyondWeb (2025) showed that rephrasing good documents into other
forms (Wikipedia-style prose, question-answer sets, distilled summaries, extracted knowledge) makes
better pretraining data than the raw text alone. This step does it against any OpenAI-compatible
endpoint: our local server on a CPU (`python -m nemotron.serve`), or vLLM, SGLang, NIM or a
hosted API at scale (`--endpoint.url`, `--endpoint.model`, `--endpoint.api-key-env`).

1. setup: seed documents (train split only) and their statistics; the strategies, whose templates
   are checked against the seed columns; the endpoint's health check and a test request. Every one
   of these fails in one line before any generation request.
2. work: optional `--preview N`; every (document, strategy) request, at most
   `--endpoint.max-parallel-requests` in flight, appended to a JSONL file as answers arrive (an
   interrupted run resumes); the judge's scores; the endpoint's throughput and MFU (at `measure`).
3. finalize: synthetic.parquet (what the stage-0 blend reads), bill.json (tokens, FLOPs, GPU-hours,
   memory, 10x-1000x projections, the MFU the endpoint reached; also printed as a table), and a
   `SyntheticDataset` whose lineage names the seed files and the model.

`--preset whole-documents` rephrases whole documents the way the lab does (`PRESETS`). Records whose
structured answer stays invalid after the retries are counted (`failed_records`) and left out; a re-run
asks for them again. An endpoint that stays unreachable stops the run with one line naming the URL
(what was written is kept).

    python -m nemotron.serve --port 8000 &
    python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_data --strategies wikipedia_rephrase diverse_qa
    python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_data --preset whole-documents \\
        --endpoint.url http://GPU_HOST:8000/v1 --endpoint.model nemotron-3-nano --active-params 3.2e9 --num-gpus 1
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from nemotron import atomic
from nemotron.artifact import ArtifactRef, apply_scale, mark_unfinished, source_ref
from nemotron.cli import run
from nemotron.errors import NemotronError
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
MFU_KEYS = ("active_params", "num_gpus", "peak_flops", "effective_mfu_sequential", "effective_mfu_concurrent")


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
    max_seed_chars: int | None = 1500
    """Each seed text is cut to this many characters in the prompt (and for the judge); None: the whole document."""
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
    active_params: float | None = None
    """Weights the served model uses per token, for the MFU of the measurement; default: the parameter count
    our server reports (a dense model: all of them). Give it for any other server (Nemotron 3 Nano 30B-A3B:
    3.2e9); without it and without a count from the server, no MFU is computed (and the run says so)."""
    num_gpus: int = 0
    """GPUs the endpoint's model runs on (vLLM's --tensor-parallel-size x --data-parallel-size); 0: a CPU server
    (ours on this machine), whose peak is the whole machine's."""
    peak_flops: float | None = None
    """Stated peak FLOP/s of one serving device, for the MFU; default: an H100's dense bf16 989 TFLOP/s per GPU
    with --num-gpus >= 1, this machine's CPU (CPU_PEAK_FLOPS) with 0."""
    bill_mfu: float = cost.SERVING_MFU
    """MFU assumed for the GPU-hours of the compute bill."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/synthetic_data")
    """Where the Parquet, the bill, the resumable request files and the artifact go."""
    preset: Literal["whole-documents"] | None = None
    """Start from a named set of the settings above (`PRESETS`); any flag given beside it still wins. Applied
    when the command line is parsed; in Python start from `PRESETS[name]`."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the number of seed documents."""
    seed: int = 0
    """Seeds the choice of seed documents."""


def main(config: Config) -> SyntheticDataset:
    started = time.perf_counter()
    # --- setup: seed data, strategies (templates checked), the endpoint checked: all before any request ---
    if config.num_gpus < 0 or (config.active_params is not None and config.active_params <= 0):
        raise NemotronError(f"--num-gpus {config.num_gpus} must be 0 (a CPU server) or more, and --active-params "
                            f"{config.active_params} a positive count of weights (e.g. 3.2e9)")
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

    # --- work: preview (records beside their originals, on stderr), generate (resumable:
    # `nemotron.sdg.client.run_jobs`), judge (a rubric, as structured output), measure (sequential vs concurrent) ---
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
    measured = {key: throughput[key] for key in MFU_KEYS if key in throughput} or None
    bill = cost.bill(tokens, len(records), mfu=config.bill_mfu, measured=measured)
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
    """Sequential vs concurrent throughput of the endpoint, and the effective MFU it implies.

    The MFU is 2 x active parameters x tokens/s over the peak of the serving devices, for any server:
    `--active-params` (default: what our server reports), `--num-gpus` (0: a CPU server) and `--peak-flops`
    (per device).
    """
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    n = config.measure_requests
    sequential = measure_throughput(client, messages, requests=n, concurrency=1, max_tokens=config.measure_max_tokens)
    concurrent = measure_throughput(client, messages, requests=n, concurrency=client.endpoint.max_parallel_requests,
                                    max_tokens=config.measure_max_tokens)
    speedup = concurrent["total_tokens_per_second"] / sequential["total_tokens_per_second"]
    result = {"sequential": sequential, "concurrent": concurrent, "speedup_tokens_per_second": speedup}
    # MFU for any server: the flags say what it runs on; our own server also reports its parameter count
    params = config.active_params or (served.get("nemotron") or {}).get("parameters")
    if params:
        peak = config.peak_flops or (cost.H100_BF16_FLOPS if config.num_gpus else CPU_PEAK_FLOPS)
        result |= {"active_params": params, "num_gpus": config.num_gpus, "peak_flops": peak}
        for name in ("sequential", "concurrent"):
            result[f"effective_mfu_{name}"] = cost.effective_mfu(params, result[name]["total_tokens_per_second"],
                                                                 peak, max(1, config.num_gpus))
    else:
        print(f"synthetic_data: no MFU: {config.endpoint.url} does not report its model's parameter count; pass "
              "--active-params (and --num-gpus, --peak-flops) for it", file=sys.stderr)
    print(f"synthetic_data: throughput {n} requests: "
          f"sequential {sequential['decode_tokens_per_second']:.1f} decode tok/s, "
          f"{client.endpoint.max_parallel_requests} concurrent "
          f"{concurrent['decode_tokens_per_second']:.1f} decode tok/s "
          f"({result['speedup_tokens_per_second']:.2f}x)", file=sys.stderr)
    return result


def _json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


# The lab's rephrasing at its own scale (src/nemotron/sdg/README.md, "At the lab's scale"): whole documents
# (~2,000 tokens each), answers of up to 2,048 tokens at temperature 0.7 from a reasoning model with its
# thinking switched off, 64 requests in flight. Strings of a structured answer may run to 1,000 characters
# (a QA answer about a whole document), and a judgment has room for three such reasons. The README gives the
# vLLM launch command it pairs with.
PRESETS = {
    "whole-documents": Config(
        max_seed_chars=None, max_field_chars=1000, judge_max_tokens=1024, measure_requests=64, measure_max_tokens=256,
        endpoint=Endpoint(max_tokens=2048, temperature=0.7, max_parallel_requests=64,
                          extra_body={"chat_template_kwargs": {"enable_thinking": False}})),
}


if __name__ == "__main__":
    run(main, presets=PRESETS)
