"""nano3 stage 0, end to end: raw text -> curated shards -> MoE model and dense counterpart -> bits per byte.

    python -m nemotron.recipes.nano3.stage0_pretrain --scale tiny

runs four steps, each one a plain function call, skipped when its output is up to date:

  data_curation                                 the curation library, nano3's stage lists and
                                                chat template (data_curation.py)    -> data_curation/
  training                                      the MoE model, with load balancing  -> training/
  training --dense                              its dense counterpart, same active parameters,
                                                about the same CPU time               -> training_dense/
  evaluation                                    held-out bits per byte: MoE, dense, unigram

Every knob of every step is a flag: `--training.steps 100`, `--dense-training.lr 2e-3`, ...
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nemotron.cli import run
from nemotron.recipes.nano3.stage0_pretrain import data_curation, evaluation, training
from nemotron.recipes.orchestration import RecipeSettings, refuse_overridden_flags, run_step


@dataclass
class Config(RecipeSettings):
    """nano3 stage 0: pretraining the MoE model and its dense counterpart."""

    output_dir: Path = Path("runs/nano3/stage0_pretrain")
    """Each step writes into a folder of its own name under this one."""
    data_curation: data_curation.Config = field(default_factory=data_curation.Config)
    """Settings of the data curation step (`data_curation.py --help` lists them)."""
    training: training.Config = field(default_factory=training.Config)
    """Settings of the MoE training step (`training.py --help` lists them)."""
    dense_training: training.Config = field(default_factory=lambda: training.Config(dense=True))
    """Settings of the dense counterpart's training (the same step with --dense)."""
    evaluation: evaluation.Config = field(default_factory=evaluation.Config)
    """Settings of the evaluation step (`evaluation.py --help` lists them)."""


def main(config: Config) -> dict:
    refuse_overridden_flags(config)
    shared = dict(scale=config.scale, seed=config.seed)
    out = config.output_dir

    dataset = run_step(data_curation.main, replace(config.data_curation, output_dir=out / "data_curation", **shared),
                       data_curation.PretrainDataset, force=config.force)
    trained = {}
    for name, settings, folder in (("moe", config.training, "training"),
                                   ("dense", config.dense_training, "training_dense")):
        trained[name] = run_step(training.main, replace(settings, dataset_path=dataset.path, output_dir=out / folder,
                                                        **shared),
                                 training.Nano3PretrainCheckpoint, inputs=[dataset], force=config.force)
    results = run_step(evaluation.main,
                       replace(config.evaluation, checkpoint_path=trained["moe"].path,
                               dense_checkpoint_path=trained["dense"].path, dataset_path=dataset.path,
                               output_dir=out / "evaluation", **shared),
                       evaluation.Nano3PretrainResults, inputs=[trained["moe"], trained["dense"]], force=config.force)
    return {"pretraindataset": dataset, "nano3pretraincheckpoint": trained["moe"],
            "nano3pretraincheckpoint_dense": trained["dense"], "nano3pretrainresults": results}


if __name__ == "__main__":
    run(main)
