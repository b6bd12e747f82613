"""Step 2 of the hello pipeline: fit a unigram language model to word counts.

The smallest possible "training" step: p(w) = (count(w) + k) / (N + k * (V + 1)), add-k smoothing,
with one extra slot for words never seen in training. Input: a `WordCounts` artifact (by path or
on stdin). Output: a `UnigramModel` artifact whose lineage records the counts it was fitted on.

    python examples/hello_pipeline/count_words.py | python examples/hello_pipeline/fit_unigram.py
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from count_words import WordCounts
from pydantic import Field

from nemotron import atomic
from nemotron.artifact import Artifact, ArtifactPath
from nemotron.cli import run


@dataclass
class Config:
    """Fit an add-k smoothed unigram model."""

    counts_path: Path | None = None
    """A WordCounts artifact folder; default: read it from stdin."""
    counts_artifact: str | None = None
    """Or a tracked reference such as `wordcounts:latest` (needs NEMOTRON_TRACKER=file:LEDGER)."""
    output_dir: Path = Path("runs/hello/unigram")
    smoothing: float = 0.5
    """k in add-k smoothing; must be > 0 so unseen words get probability."""
    scale: str = "tiny"
    seed: int = 0


class UnigramModel(Artifact):
    model_path: ArtifactPath
    vocab_size: int = Field(gt=0)


def main(config: Config) -> UnigramModel:
    counts_art = WordCounts.load_input(config, "counts")  # --counts-path, --counts-artifact or stdin
    counts: dict[str, int] = json.loads(counts_art.counts_path.read_text())

    total, vocab, k = sum(counts.values()), len(counts), config.smoothing
    denominator = total + k * (vocab + 1)
    log_probs = {w: math.log((c + k) / denominator) for w, c in counts.items()}
    unseen = math.log(k / denominator)

    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    model = {"log_probs": log_probs, "unseen_log_prob": unseen}
    atomic.write_text(out / "unigram.json", json.dumps(model, sort_keys=True))
    return UnigramModel(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[counts_art],
        model_path=out / "unigram.json",
        vocab_size=vocab + 1,
        metrics={"train_words": total},
    ).save()


if __name__ == "__main__":
    run(main)
