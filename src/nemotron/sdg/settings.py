"""The synthetic-data options a stage-0 curation step's Config holds (`--synthetic.*`).

`--synthetic.strategies wikipedia_rephrase diverse_qa` makes nano2's stage-0 curation first run its
`synthetic_data` step into `<output_dir>/synthetic` (seed documents of the train split rephrased by the model
behind `--synthetic.endpoint.url`; skipped when already up to date, resumed when it was interrupted), then
add its records to the TRAIN split only (a file of their own), as `--synthetic.weight` of the train documents
(repeating them when that asks for more than there are, as a blend upweights a source;
`nemotron.data_prep.curation.write_synthetic`). They skip the heuristic filters, which are tuned for web
text (a QA list or a bulleted list of facts would fail the Gopher line rules), and are counted in
`synthetic`. Lineage: the PretrainDataset's inputs hold the SyntheticDataset, whose inputs hold the seed
files and the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nemotron.sdg.client import Endpoint


@dataclass
class Synthetic:
    """Rephrased documents in the train split (nemotron.sdg); off while `strategies` is empty."""

    strategies: tuple[str, ...] = ()
    """Rephrasing strategies, e.g. wikipedia_rephrase diverse_qa; empty: no synthetic data."""
    weight: float = 0.1
    """Share of the train split's documents that are rephrased records (0 < weight < 1)."""
    num_documents: int | None = None
    """Seed documents to rephrase; default per scale (synthetic_data.py: tiny 4)."""
    max_seed_chars: int | None = 1500
    """Each seed text is cut to this many characters in the prompt; None: the whole document."""
    max_field_chars: int = 300
    """Cap on every string of a structured answer (QA fields, judge reasons)."""
    max_list_items: int | None = None
    """Cap on the items of every list of a structured answer (at least 3 QA pairs stay required)."""
    judge: bool = True
    """Score each rephrase with the LLM judge."""
    judge_max_tokens: int = 160
    """Most tokens of one judgment."""
    measure_requests: int = 4
    """Requests of the endpoint throughput measurement; 0 skips it."""
    endpoint: Endpoint = field(default_factory=Endpoint)
    """The rephrasing model's OpenAI-compatible endpoint (start one with python -m nemotron.serve)."""
