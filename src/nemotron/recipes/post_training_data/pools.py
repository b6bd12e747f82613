"""Post-training data, step 2: group normalized records into named candidate pools.

Each pool is a readable predicate over the normalized schema (`nemotron.data_prep.post_training.pools`:
high_correctness, tool_use, reasoning, proof, hard, multi_turn; add one with `@pool` in a module given to
`--pool-modules`). A record may be in several pools. Each pool is written as its own Parquet set,
`<output_dir>/pools/<name>/<name>-00000-of-00001.parquet`, with `pools/manifest.json` giving every pool's
predicate, its size and its size per dataset. Scale caps a pool (tiny 10,000 records), keeping the
records with the smallest ids (ids are sha1 hashes, so this is a deterministic, unbiased sample).

Input: a `PostTrainingDataset` (normalize). Output: `CandidatePools`.

    python -m nemotron.recipes.post_training_data.pools --dataset-path runs/post_training_data/normalize
    python -m nemotron.recipes.post_training_data.normalize | python -m nemotron.recipes.post_training_data.pools
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import apply_scale, mark_unfinished
from nemotron.cli import run
from nemotron.data_prep.post_training.pools import load_pool_modules, resolve_pools
from nemotron.data_prep.post_training.schema import read_records, split_files, write_records
from nemotron.data_prep.settings import CurationSettings
from nemotron.errors import NemotronError
from nemotron.recipes.post_training_data.artifacts import CandidatePools, PostTrainingDataset

FULL_POOL_SIZE = 1_000_000


@dataclass
class Config(CurationSettings):  # output_dir, scale, seed (nemotron.data_prep.settings)
    """Group normalized records into named candidate pools."""

    dataset_path: Path | None = None
    """A PostTrainingDataset folder; default: read it from stdin."""
    dataset_artifact: str | None = None
    """Or a tracked reference such as `posttrainingdataset:latest`."""
    pools: tuple[str, ...] = ()
    """Pool names to build; default: every registered pool."""
    pool_modules: tuple[str, ...] = ()
    """Modules to import first; their @pool predicates become available."""
    output_dir: Path = Path("runs/post_training_data/pools")


def main(config: Config) -> CandidatePools:
    dataset = PostTrainingDataset.load(path=config.dataset_path, tracked_artifact=config.dataset_artifact,
                                       scale=config.scale)
    started = time.perf_counter()
    load_pool_modules(config.pool_modules)
    pools = resolve_pools(config.pools)
    records = [r for folder in dataset.dataset_dirs
               for files in split_files(folder).values() for r in read_records(files)]
    cap = apply_scale(FULL_POOL_SIZE, config.scale)

    out = config.output_dir
    mark_unfinished(out)  # until this run completes, the folder holds no artifact
    shutil.rmtree(out / "pools", ignore_errors=True)  # pools of an earlier run must not linger
    manifest = {}
    for pool in pools:
        members = sorted((r for r in records if pool.predicate(r)), key=lambda r: r["id"])
        capped = members[:cap]
        if capped:
            write_records(capped, out / "pools" / pool.name / f"{pool.name}-00000-of-00001.parquet")
        manifest[pool.name] = {
            "predicate": pool.description,
            "records": len(capped),
            "dropped_by_scale": len(members) - len(capped),
            "by_dataset": dict(sorted(Counter(r["dataset"] for r in capped).items())),
        }
        print(f"pool {pool.name:<18} {len(capped):>6} records", file=sys.stderr)
    if not any(entry["records"] for entry in manifest.values()):
        raise NemotronError(f"every pool is empty ({', '.join(manifest)}); check the dataset or the predicates")
    atomic.write_text(out / "pools" / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return CandidatePools(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[dataset],
        pools_dir=out / "pools",
        pools={name: entry["records"] for name, entry in manifest.items()},
        metrics={"records_in": len(records), "pool_sizes": {n: e["records"] for n, e in manifest.items()},
                 "records_in_no_pool": sum(1 for r in records if not any(p.predicate(r) for p in pools)),
                 "wall_seconds": time.perf_counter() - started},
    ).save()


def pool_files(pools_dir: Path) -> dict[str, list[Path]]:
    """{pool name: its Parquet files} of a pools folder."""
    return {folder.name: sorted(folder.glob("*.parquet")) for folder in sorted(Path(pools_dir).iterdir())
            if folder.is_dir() and any(folder.glob("*.parquet"))}


if __name__ == "__main__":
    run(main)
