"""The hello pipeline as one command: the three steps as plain function calls.

    python examples/hello_pipeline --scale tiny

The stage config nests the three step configs (`--count.*`, `--fit.*`, `--report.*`) and shares
`--scale`, `--seed` and `--output-dir`; each step's output path is handed to the next explicitly.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # the step modules sit next to this file

import count_words  # noqa: E402
import fit_unigram  # noqa: E402
import report_perplexity  # noqa: E402

from nemotron.cli import run  # noqa: E402


@dataclass
class Config:
    """Count words -> fit a unigram model -> report held-out perplexity."""

    output_dir: Path = Path("runs/hello")
    scale: str = "tiny"
    seed: int = 0
    count: count_words.Config = field(default_factory=count_words.Config)
    fit: fit_unigram.Config = field(default_factory=fit_unigram.Config)
    report: report_perplexity.Config = field(default_factory=report_perplexity.Config)


def main(config: Config) -> dict:
    shared = dict(scale=config.scale, seed=config.seed)
    counts = count_words.main(
        replace(config.count, output_dir=config.output_dir / "word_counts", **shared)
    )
    model = fit_unigram.main(
        replace(config.fit, counts_path=counts.path, output_dir=config.output_dir / "unigram", **shared)
    )
    report = report_perplexity.main(
        replace(
            config.report,
            model_path=model.path,
            counts_path=counts.path,
            output_dir=config.output_dir / "report",
            **shared,
        )
    )
    return {"wordcounts": counts, "unigrammodel": model, "perplexityreport": report}


if __name__ == "__main__":
    run(main)
