"""Post-training data, step 1: normalize heterogeneous chat datasets into Harmony-rendered Parquet.

Each source is `FAMILY=PATH[#SPLIT]`: a reader family (math, proofs, science, agentic, chat, harmony;
see `nemotron.data_prep.post_training.records` for what each maps), a local .jsonl / .parquet file or
`hf:NAME[@CONFIG]` (anything `datasets.load_dataset` resolves; offline, from the local cache), and the
split (default: the file name, e.g. `medium.jsonl` -> medium). Without `--sources` the step reads the
demo input shipped with the package (five families, awkward cases included).

For every record: read -> map to Harmony messages -> render `text` -> check that it parses back ->
signals (`meta_*`) and quality flags. Then filter and dedup, counting every removal by reason:
`unknown role`, `tool arguments not JSON`, `no assistant turn`, `not JSON` (file and line on stderr),
`empty completion`, `exact duplicate` (same rendered text), `empty input`, ... `--strict` turns the
first invalid record into an error naming file and line instead.

Output (`PostTrainingDataset`): the Hugging Face layout `<output_dir>/<dataset>/data/<split>/*.parquet`
with a generated dataset card `<dataset>/README.md` (schema, counts per split and per removal reason).
The work runs on the data-prep stage runner (`nemotron.data_prep.stages`): each source is cut into
work items, each receipted under `<output_dir>/work/`, so a killed run resumes; the bytes do not
depend on `--workers` or on `--units-per-source`.

    python -m nemotron.recipes.post_training_data.normalize --scale tiny
    python -m nemotron.recipes.post_training_data.normalize \\
        --sources math=medium.jsonl agentic=hf:nvidia/Nemotron-Agentic-v1#tool_calling
    python -m nemotron.recipes.post_training_data.normalize | python -m nemotron.recipes.post_training_data.pools
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from nemotron.artifact import ArtifactRef, mark_unfinished, source_ref
from nemotron.artifact.fields import added, execution, recorded
from nemotron.cli import run
from nemotron.data_prep.post_training.normalize_run import Source, finalize_normalize, plan_normalize
from nemotron.data_prep.settings import CurationSettings
from nemotron.data_prep.stages import run_stages
from nemotron.recipes.post_training_data.artifacts import PostTrainingDataset

DEMO_DIR = Path(__file__).parent / "demo"


def demo_sources() -> tuple[str, ...]:
    """The demo input: `demo/<family>/<split>.jsonl`, in sorted order."""
    return tuple(f"{path.parent.name}={path}" for path in sorted(DEMO_DIR.glob("*/*.jsonl")))


@dataclass
class Config(CurationSettings):  # output_dir, scale, seed (nemotron.data_prep.settings)
    """Normalize post-training sources into Harmony-rendered Parquet (Hugging Face layout)."""

    sources: tuple[str, ...] = ()
    """FAMILY=PATH[#SPLIT] or FAMILY=hf:NAME[@CONFIG]#SPLIT; default: the shipped demo input."""
    strict: bool = False
    """Stop at the first invalid record (file and line) instead of counting and skipping it; empty
    completions and duplicates are valid records and are still filtered and counted."""
    units_per_source: int = 2
    """Each source is cut into this many work items (the resume and parallelism grain)."""
    records_per_file: int = 10_000
    """Parquet files per split hold at most this many records."""
    max_records: int | None = added(None)
    """Read only the first N records of each source (a smoke run over a real set); default: all."""
    workers: int = execution(1)
    """Worker processes (a local pool when above 1); the output bytes do not depend on it."""
    output_dir: Path = Path("runs/post_training_data/normalize")


def main(config: Config) -> PostTrainingDataset:
    started = time.perf_counter()
    sources = [Source.parse(spec) for spec in config.sources or demo_sources()]
    out = config.output_dir
    mark_unfinished(out)  # until this run completes, the folder holds no artifact

    # --- setup: the sources cut into work items, the stage list, the run hash ---
    plan = plan_normalize(sources, out, config.units_per_source, config.strict, config.max_records)
    # --- stages: read -> normalize -> write Parquet per work item, in parallel, each receipted ---
    statuses = run_stages(plan.stages, workers=config.workers)
    # --- finalize: dedup, Hugging Face layout, dataset cards ---
    result = finalize_normalize(plan, out, config.records_per_file)

    for reason, n in result.removed.items():
        print(f"removed {n:>5}  {reason}", file=sys.stderr)
    if plan.capped_sources:
        print(f"--max-records {config.max_records}: read the first {config.max_records} records of "
              f"{len(plan.capped_sources)} of {len(sources)} sources, not the rest", file=sys.stderr)
    capped = {} if config.max_records is None else {
        "max_records": config.max_records, "sources_cut_short": [Path(s).name for s in plan.capped_sources]}
    lineage = [source_ref(s.location) if s.kind != "hf" else ArtifactRef(type="hf_dataset", path=s.location)
               for s in sources]
    return PostTrainingDataset(
        path=out,
        config=recorded(config),  # without max_records when it is not set (`fields.added`)
        scale=config.scale,
        seed=config.seed,
        inputs=lineage,
        dataset_dirs=result.dataset_dirs,
        num_records=sum(sum(splits.values()) for splits in result.counts.values()),
        records_per_split=result.counts,
        metrics={**result.as_metrics(), "sources": [f"{s.family}={s.location}#{s.split}" for s in sources],
                 "run_hash": plan.stages.run_hash, "units": len(plan.stages.items),
                 "units_skipped": list(statuses.values()).count("skipped"), **capped,
                 "wall_seconds": time.perf_counter() - started},
    ).save()


if __name__ == "__main__":
    run(main)
