"""The artifacts of the post-training data pipeline, together (normalize -> pools -> score -> select).

| class                | made by         | files (digested)                                   |
|----------------------|-----------------|----------------------------------------------------|
| `PostTrainingDataset`| normalize.py    | `<tag>/data/<split>/*.parquet` + `<tag>/README.md` per dataset |
| `CandidatePools`     | pools.py        | `pools/<name>/*.parquet`, `pools/manifest.json`    |
| `ScoredSelection`    | score.py        | `scores.parquet` (one NLL per record), `selected.parquet` |
| `DiverseSelection`   | embed_select.py | `selected.parquet`, `embeddings.npy`, `report.json`|

Every selected record keeps the normalized schema (`nemotron.data_prep.post_training.schema`), so the
lineage of `python -m nemotron.artifact lineage <embed_select dir>` walks back to the raw files.
"""

from __future__ import annotations

from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath


class PostTrainingDataset(Artifact):
    dataset_dirs: list[ArtifactPath]
    num_records: int = Field(gt=0)
    records_per_split: dict[str, dict[str, int]]


class CandidatePools(Artifact):
    pools_dir: ArtifactPath
    pools: dict[str, int]


class ScoredSelection(Artifact):
    scores_path: ArtifactPath
    selected_path: ArtifactPath
    reference_model: str
    num_scored: int = Field(gt=0)
    num_selected: int = Field(gt=0)


class DiverseSelection(Artifact):
    selected_path: ArtifactPath
    embeddings_path: ArtifactPath
    report_path: ArtifactPath
    num_selected: int = Field(gt=0)
