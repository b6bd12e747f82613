"""The whole nano2 recipe: raw text -> pretrained -> instruction-tuned -> preference-aligned model.

    python -m nemotron.recipes.nano2 --scale tiny                # ~5 minutes on a 2-core CPU
    python -m nemotron.recipes.nano2 --scale tiny --force        # re-run every step

Three stages, nine steps, called as plain functions; each stage's artifacts feed the next; then a tenth step
scores the final (DPO) model on the standard benchmarks:

  stage0_pretrain   data_curation -> training -> evaluation    (PretrainDataset, PretrainCheckpoint, PretrainResults)
  stage1_sft        data_curation -> training -> evaluation    (SFTDataset, SFTCheckpoint, SFTResults)
  stage2_alignment  data_curation -> training -> evaluation    (PreferenceDataset, DPOCheckpoint, DPOResults)
  evaluation        benchmarks: MMLU, HellaSwag, ARC, PIQA, WinoGrande, BoolQ, LAMBADA, GSM8K, each with a
                    control (StandardBenchmarkResults; `python -m nemotron.evaluation`, 10 items per task at tiny)

At `--scale full` the training steps hand their work to Megatron-Bridge on a GPU cluster instead
(`at_scale.py`; `--dry-run --data-root s3://bucket/prefix --nodes 4 --gpus-per-node 8` prints the plan).

At the end a report card is written to `<output-dir>/report/report.md` (see report.py). Re-running
skips every step whose output is already there with the same config and inputs; an interrupted
training step resumes from its last checkpoint. Every knob of every step is a flag:
`--stage0.training.steps 100`, `--stage1.data-curation.pack-size 512`, ... (see --help).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import nemotron.recipes.nano2.stage0_pretrain.__main__ as stage0
import nemotron.recipes.nano2.stage1_sft.__main__ as stage1
import nemotron.recipes.nano2.stage2_alignment.__main__ as stage2
from nemotron.artifact.fields import execution
from nemotron.cli import run
from nemotron.evaluation.settings import BenchmarkSettings
from nemotron.recipes.nano2 import at_scale
from nemotron.recipes.nano2.report import write_report
from nemotron.recipes.orchestration import SUMMARY, benchmark_final_model, refuse_overridden_flags


@dataclass
class Config:
    """The nano2 recipe, all stages."""

    output_dir: Path = Path("runs/nano2")
    """Each stage writes into a folder of its own name under this one."""
    scale: str = "tiny"
    """tiny | small | medium | full: sizes the data, the model and the steps (tiny runs on a laptop CPU)."""
    seed: int = 0
    """Seeds every random choice of the run: same config and seed, same bytes."""
    force: bool = execution(False)
    """Re-run steps even when their output is up to date."""
    engine: Literal["plain", "megatron-bridge"] | None = None
    """Who trains: the steps' own loops (plain) or Megatron-Bridge on a GPU cluster; default: plain, and
    megatron-bridge at --scale full (see at_scale.py)."""
    dry_run: bool = False
    """With megatron-bridge: prepare the data and write the run folders, print the plan, start nothing."""
    data_root: str | None = None
    """With megatron-bridge: where the cluster reads our data (a shared absolute path or s3://bucket/prefix)."""
    nodes: int | None = None
    """With megatron-bridge: the number of nodes."""
    gpus_per_node: int | None = None
    """With megatron-bridge: GPUs per node."""
    container_image: str | None = None
    """With megatron-bridge: the container Slurm runs the job in (pyxis); none: the nodes' own Python."""
    stage0: stage0.Config = field(default_factory=stage0.Config)
    """Settings of stage 0's steps (see its `__main__ --help`)."""
    stage1: stage1.Config = field(default_factory=stage1.Config)
    """Settings of stage 1's steps (see its `__main__ --help`)."""
    stage2: stage2.Config = field(default_factory=stage2.Config)
    """Settings of stage 2's steps (see its `__main__ --help`)."""
    benchmarks: BenchmarkSettings = field(default_factory=BenchmarkSettings)
    """Settings of the standard benchmarks of the final (DPO) model (`python -m nemotron.evaluation --help`):
    `--benchmarks.limit 100`, `--benchmarks.benchmarks mmlu,piqa`."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)  # a nested flag the orchestrator would overwrite is one error line
    if config.engine == "megatron-bridge" or (config.engine is None and config.scale == "full"):
        return at_scale.main(config)
    shared = dict(scale=config.scale, seed=config.seed, force=config.force)
    out = config.output_dir

    pretrain = stage0.main(replace(config.stage0, output_dir=out / "stage0_pretrain", **shared))
    sft = stage1.main(
        replace(
            config.stage1,
            checkpoint_path=pretrain["pretraincheckpoint"].path,
            output_dir=out / "stage1_sft",
            **shared,
        )
    )
    aligned = stage2.main(
        replace(
            config.stage2,
            checkpoint_path=sft["sftcheckpoint"].path,
            dataset_path=sft["sftdataset"].path,
            output_dir=out / "stage2_alignment",
            **shared,
        )
    )

    scored = benchmark_final_model(config.benchmarks, aligned["dpocheckpoint"], out, **shared)

    report = write_report(out)
    SUMMARY["report"] = report
    return {**pretrain, **sft, **aligned, scored.type: scored}


if __name__ == "__main__":
    run(main)
