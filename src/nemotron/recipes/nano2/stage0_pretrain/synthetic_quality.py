"""Stage 0, optional step: how good is the synthetic data? Perplexity and the judge, side by side per strategy.

Input: a `SyntheticDataset` (`--synthetic-path`, `--synthetic-artifact`, or stdin). Output: a
`SyntheticQuality` artifact: scores.parquet (every synthetic row plus `ppl_original` and
`ppl_rephrased`) and the table per strategy: records, mean perplexity of the originals and of the
rephrases under the reference LM, mean judge scores (coherence, faithfulness, information density,
1-5), and the output/input token ratio. The table is also printed on stderr.

The original is the seed text as the rephraser saw it (cut to `max_seed_chars`; the `original`
column), so both sides of a pair describe the same text. The reference LM is SmolLM2-135M (offline) or
any local model folder (`--reference-model`).

    python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_quality --synthetic-path runs/.../synthetic_data
    python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_data \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.synthetic_quality
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron.artifact import mark_unfinished
from nemotron.cli import run
from nemotron.recipes.nano2.artifacts import SyntheticDataset, SyntheticQuality
from nemotron.sdg.quality import format_table, perplexities, strategy_table
from nemotron.sdg.rephrase import write_parquet


@dataclass
class Config:
    """Score a SyntheticDataset: perplexity of original vs rephrased text, beside the judge's scores."""

    synthetic_path: Path | None = None
    """A SyntheticDataset folder; default: read it from stdin."""
    synthetic_artifact: str | None = None
    """Or a tracked reference such as `syntheticdataset:latest`."""
    reference_model: str = "smollm2"
    """`smollm2` (SmolLM2-135M-Instruct, offline) or a local Hugging Face model folder."""
    max_tokens: int = 256
    """Each text is scored on at most this many tokens."""
    output_dir: Path = Path("runs/nano2/stage0_pretrain/synthetic_quality")
    """Where scores.parquet and the artifact go."""
    scale: str = "tiny"
    """Must match the SyntheticDataset's scale."""
    seed: int = 0
    """Unused (scoring is deterministic); every step has one."""


def main(config: Config) -> SyntheticQuality:
    import pyarrow.parquet as pq

    started = time.perf_counter()
    # --- setup: the synthetic rows and the originals they came from ---
    synthetic = SyntheticDataset.load(path=config.synthetic_path, tracked_artifact=config.synthetic_artifact,
                                      scale=config.scale, flag="--synthetic-path")
    rows = pq.read_table(synthetic.data_path).to_pylist()  # each row carries its `original` (as the model saw it)
    out = mark_unfinished(config.output_dir.resolve())

    # --- score: perplexity of both sides of every pair under one reference LM ---
    originals = perplexities([row["original"] for row in rows], config.reference_model,
                             max_tokens=config.max_tokens)
    rephrased = perplexities([row["text"] for row in rows], config.reference_model, max_tokens=config.max_tokens)
    scored = [{**row, "ppl_original": a, "ppl_rephrased": b} for row, a, b in zip(rows, originals, rephrased)]

    # --- finalize: the table, the Parquet, the artifact ---
    table = strategy_table(scored)
    print(format_table(table), file=sys.stderr)
    write_parquet(scored, out / "scores.parquet")
    return SyntheticQuality(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[synthetic],
        scores_path=out / "scores.parquet",
        table=table,
        metrics={"records": len(scored), "table": table, "wall_seconds": time.perf_counter() - started},
    ).save()


if __name__ == "__main__":
    run(main)
