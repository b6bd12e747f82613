"""Step 3 of the hello pipeline: held-out perplexity of the unigram model.

The smallest possible "evaluation" step. It needs two inputs: the model (step 2) and the held-out
text (step 1). In a pipe `count_words | fit_unigram | report_perplexity`, step 2 passes step 1's
artifact through on its stdout, so this step finds both there.

    python examples/hello_pipeline/count_words.py | python examples/hello_pipeline/fit_unigram.py \
        | python examples/hello_pipeline/report_perplexity.py
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from count_words import WordCounts, words
from fit_unigram import UnigramModel

from nemotron.artifact import Artifact
from nemotron.cli import run


@dataclass
class Config:
    """Report held-out perplexity."""

    model_path: Path | None = None
    """A UnigramModel artifact folder; default: from stdin."""
    counts_path: Path | None = None
    """The WordCounts artifact holding the held-out text; default: from stdin."""
    output_dir: Path = Path("runs/hello/report")
    scale: str = "tiny"
    seed: int = 0


class PerplexityReport(Artifact):
    perplexity: float
    heldout_words: int


def main(config: Config) -> PerplexityReport:
    model_art = UnigramModel.load_input(config, "model")
    counts_art = WordCounts.load_input(config, "counts")
    model = json.loads(model_art.model_path.read_text())

    heldout = [w for line in counts_art.heldout_path.read_text().splitlines() for w in words(line)]
    log_probs, unseen = model["log_probs"], model["unseen_log_prob"]
    nll = -sum(log_probs.get(w, unseen) for w in heldout) / len(heldout)
    oov = sum(w not in log_probs for w in heldout)

    return PerplexityReport(
        path=config.output_dir,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[model_art, counts_art],
        perplexity=math.exp(nll),
        heldout_words=len(heldout),
        metrics={"perplexity": math.exp(nll), "nll": nll, "oov_rate": oov / len(heldout)},
    ).save()


if __name__ == "__main__":
    run(main)
