"""The settings data steps' Configs share: where a step writes, its scale and seed; what SFT curation reads.

A data-curation step (the recipes' `data_curation.py`, the post-training data pipeline's steps) declares
`class Config(CurationSettings)` and adds its own fields (sources, filters, shares); both recipes'
stage-1 SFT curation declare `class Config(SFTCurationSettings)`, their stage-0 curation
`class Config(PretrainCurationSettings)`. A step redefines `output_dir` with its
own default, and a field it has something step-specific to say about (what its seed seeds) with its own
docstring, keeping the field's marker (`nemotron.artifact.fields` says what a marker means). Mirrors
`nemotron.training.settings` and `nemotron.evaluation.settings`; torch-free, so a step's `--help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from nemotron.artifact.fields import added, execution
from nemotron.data_prep.chat.templates import ChatTemplateName


@dataclass
class CurationSettings:
    """What every data step's Config shares: where it writes, how much it reads and makes, its seed."""

    output_dir: Path = Path("runs/data_curation")
    """Where the step writes its artifact and its files."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes how much data the step reads and makes, and its per-scale
    defaults (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds the step's random choices (each step that has any says which); a step with none records it
    for lineage only."""


@dataclass
class SFTCurationSettings(CurationSettings):
    """What both recipes' SFT curation steps read: the stage-0 model's tokenizer, from its checkpoint or, at
    scale, from the stage-0 dataset; and how the work items run and their rows are packed."""

    checkpoint_path: Path | None = None
    """The stage-0 checkpoint folder (the step's description names its type; its tokenizer is the one the
    data is made with); default: read it from stdin."""
    checkpoint_artifact: str | None = None
    """Or a tracked reference such as `pretraincheckpoint:latest` (the checkpoint's type, lower case)."""
    pretrain_dataset_path: Path | None = None
    """Instead of a checkpoint, at scale: the stage-0 PretrainDataset, whose tokenizer the model will have
    (the SFT data is made before Megatron-Bridge has trained the stage-0 model)."""
    pack_size: int | None = None
    """Tokens per packed row; default per scale (tiny 256)."""
    workers: int | None = execution(None)
    """Processes for the stages' work items (the files are the same bytes for any number); default: 1 at
    tiny, where a spawned worker's imports cost more than the few work items, else one per CPU core."""


@dataclass
class PretrainCurationSettings(CurationSettings):
    """What both recipes' stage-0 curation steps read (`nemotron.data_prep.curation`): the blend, the tokenizer's
    vocabulary and chat template, the dedup threshold, and how the work items run."""

    blend_path: Path | None = None
    """A JSON data blend; default: Shakespeare, one document per scene, split 90/5/5 by document id."""
    vocab_size: int | None = None
    """BPE vocabulary size; default per scale (tokenizer.VOCAB_SIZES: tiny 4096, small 8192, medium 32768,
    full 131072, Nemotron Nano 2's vocabulary)."""
    quality_threshold: float = added(1.0)
    """Keep a document whose quality score, the share of the heuristic filters it passes
    (`data_prep.quality`), is at least this; 1.0 (the default): every filter must pass."""
    near_duplicate_threshold: float = 0.8
    """Estimated Jaccard similarity at which a later document counts as a near duplicate."""
    num_shards: int = 4
    """bin/idx shards of the train split; valid and test get shards in proportion to their size."""
    chat_template: ChatTemplateName = "nano2"
    """The chat format saved with the tokenizer, for the later stages: nano2 (ChatML) or nano3 (ChatML with
    reasoning traces and tool calls, `nemotron.data_prep.chat.nano3`); the nano3 recipe sets nano3."""
    workers: int | None = execution(None)
    """Tokenization processes (the shards are the same bytes for any number); default: 1 at tiny, where
    5 MB tokenizes in ~3 s and each spawned worker would spend ~2 s importing, else one per CPU core."""
    executor: Literal["local", "ray"] = "local"
    """Where the tokenization shards run: local (this process, or a pool of --workers processes) or ray
    (each shard a Ray task; RAY_ADDRESS names a cluster, else a local Ray starts). Same bytes either way."""
    seed: int = 0
    """Seeds the blend's weighted draw and shuffle, and the scale cap's choice of documents."""
