"""Stage 0, step 1 (nano3): curate raw text into a BPE tokenizer and bin/idx shards for pretraining.

nano3 pretrains on the same data path as nano2 (Shakespeare by default, or `--blend-path`), so this step
reuses nano2's curation library (`nemotron.recipes.nano2.stage0_pretrain.data_curation.curate`: the run
hash, the receipts, the dedup driver, the tokenizer) and names its own stage lists here, in the order
they run over the blend's work items (`nemotron.data_prep.stages`):

  signatures   read -> signature: per document, the quality verdict (Gopher / C4 heuristics), its split
               (a hash of its id), the exact-dedup hash and the MinHash sketch
  (driver)     from the signatures alone: scale cap -> quality -> exact dedup -> near dedup -> the
               blend's weighted draw (`stages.dedup.resolve_signatures`)
  split        read -> drop by those decisions, split, repeat -> split JSONL per work item
  (driver)     a byte-level BPE tokenizer trained on the train split, saved with the nano3 chat template
               (reasoning traces and tool calls, `nemotron.data_prep.chat.nano3`) for stages 1 and 2
  shards       read the split files -> tokenize -> bin/idx shards

The one difference from nano2's step is the chat template saved with the tokenizer (nano3), and where it
writes. For the same settings, the shards and tokenizer are byte for byte nano2's (tested:
tests/test_nano3_recipe.py), so the two recipes' stage-0 numbers compare.

    python -m nemotron.recipes.nano3.stage0_pretrain.data_curation --scale tiny
    python -m nemotron.recipes.nano3.stage0_pretrain.data_curation --scale tiny \\
        | python -m nemotron.recipes.nano3.stage0_pretrain.training --scale tiny
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.chat.templates import ChatTemplateName
from nemotron.data_prep.stages import FilterSplitStage, ReadStage, TokenizeWriteStage
from nemotron.data_prep.stages.dedup import DecisionStage, SignatureStage
from nemotron.recipes.nano2.stage0_pretrain import data_curation as nano2_curation
from nemotron.recipes.nano3.artifacts import PretrainDataset


@dataclass
class Config(nano2_curation.Config):
    """Curate a data blend into a BPE tokenizer (nano3 chat template) and bin/idx shards for pretraining."""

    chat_template: ChatTemplateName = "nano3"
    """The chat format saved with the tokenizer: nano3 (ChatML with reasoning traces and tool calls)."""
    output_dir: Path = Path("runs/nano3/stage0_pretrain/data_curation")


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
    return nano2_curation.curate(config, (signature_stages, split_stages, shard_stages))


if __name__ == "__main__":
    run(main)
