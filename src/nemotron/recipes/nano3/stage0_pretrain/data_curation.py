"""Stage 0, step 1 (nano3): curate raw text into a BPE tokenizer and bin/idx shards for pretraining.

nano3 pretrains on the same data path as nano2 (Shakespeare by default, or `--blend-path`), so this step
calls the curation library nano2's step calls (`nemotron.data_prep.curation.curate`: the run hash, the
receipts, the dedup driver, the tokenizer) and names its own stage lists here, in the order they run over
the blend's work items (`nemotron.data_prep.stages`):

  signatures   read -> signature: per document, the quality verdict (Gopher / C4 heuristics), its split
               (a hash of its id), the exact-dedup hash and the MinHash sketch
  (driver)     from the signatures alone: scale cap -> quality -> exact dedup -> near dedup -> the
               blend's weighted draw (`stages.dedup.resolve_signatures`)
  split        read -> drop by those decisions, split, repeat -> split JSONL per work item
  (driver)     a byte-level BPE tokenizer trained on the train split, saved with the nano3 chat template
               (reasoning traces and tool calls, `nemotron.data_prep.chat.nano3`) for stages 1 and 2
  shards       read the split files -> tokenize -> bin/idx shards

The differences from nano2's step: the chat template saved with the tokenizer (nano3), where it writes, and
no synthetic data (`--synthetic.strategies` is refused: nano2's stage-0 curation makes it). For the same
settings, the shards and tokenizer are byte for byte nano2's (tested:
tests/test_nano3_recipe.py), so the two recipes' stage-0 numbers compare.

    python -m nemotron.recipes.nano3.stage0_pretrain.data_curation --scale tiny
    python -m nemotron.recipes.nano3.stage0_pretrain.data_curation --scale tiny \\
        | python -m nemotron.recipes.nano3.stage0_pretrain.training --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nemotron.artifact.fields import recorded
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.chat.templates import ChatTemplateName
from nemotron.data_prep.curation import StageLists, curate, load_pretrain_blend
from nemotron.data_prep.settings import PretrainCurationSettings
from nemotron.data_prep.stages import FilterSplitStage, ReadStage, TokenizeWriteStage
from nemotron.data_prep.stages.dedup import DecisionStage, SignatureStage
from nemotron.errors import NemotronError
from nemotron.recipes.nano3.artifacts import PretrainDataset
from nemotron.sdg.settings import Synthetic


@dataclass
class Config(PretrainCurationSettings):  # blend, vocabulary, dedup, shards, workers (nemotron.data_prep.settings)
    """Curate a data blend into a BPE tokenizer (nano3 chat template) and bin/idx shards for pretraining."""

    chat_template: ChatTemplateName = "nano3"
    """The chat format saved with the tokenizer: nano3 (ChatML with reasoning traces and tool calls)."""
    output_dir: Path = Path("runs/nano3/stage0_pretrain/data_curation")
    synthetic: Synthetic = field(default_factory=Synthetic)
    """Kept empty here (its config matches nano2's for the same settings); nano2's stage-0 curation rephrases."""


def signature_stages(blend: DataBlend, seed: int, quality_threshold: float = 1.0) -> list:
    """read -> quality verdict, split, exact hash and MinHash sketch per document."""
    return [ReadStage(mode="text"),
            SignatureStage(blend.split, filters="default", seed=seed, quality_threshold=quality_threshold)]


def split_stages(resolution) -> list:
    """read -> drop by the driver's decisions (counted per reason), split, repeat -> <split>/shard_NNNNN.jsonl."""
    return [ReadStage(mode="text"), DecisionStage(resolution), TokenizeWriteStage("jsonl", None, record="document")]


def shard_stages(tokenizer_dir: Path) -> list:
    """read a split's files (each item's split is its folder's) -> tokenize -> bin/idx."""
    return [ReadStage(mode="text"), FilterSplitStage(None), TokenizeWriteStage("bin_idx", tokenizer_dir)]


def main(config: Config) -> PretrainDataset:
    if config.synthetic.strategies:
        raise NemotronError("--synthetic.strategies: nano3's stage-0 curation makes no synthetic data; run "
                            "nemotron.recipes.nano2.stage0_pretrain.data_curation with it instead")
    curation = curate(config, load_pretrain_blend(config.blend_path),
                      StageLists(signatures=signature_stages, split=split_stages, shards=shard_stages))
    return PretrainDataset(config=recorded(config), scale=config.scale, seed=config.seed, inputs=curation.sources,
                           **curation.dataset_fields()).save()


if __name__ == "__main__":
    run(main)
