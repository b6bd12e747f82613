"""nano3 stage 0, end to end: raw text -> curated shards -> MoE model and dense counterpart -> bits per byte.

    python -m nemotron.recipes.nano3.stage0_pretrain --scale tiny

runs five steps, each one a plain function call, skipped when its output is up to date:

  data_curation                                 the curation library, nano3's stage lists and
                                                chat template (data_curation.py)    -> data_curation/
  training                                      the MoE model, with load balancing  -> training/
  training --dense                              its dense counterpart, same active parameters,
                                                the same tokens                      -> training_dense/
  training --dense --equal-time                 the dense counterpart for the MoE run's time
                                                (MOE_STEP_TIME_RATIO x the steps)   -> training_dense_time/
  evaluation                                    held-out bits per byte: MoE, dense, unigram; the MoE
                                                against each dense run, paired over the windows

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
    """Settings of the dense counterpart's training on the MoE's tokens (the same step with --dense)."""
    dense_time_training: training.Config = field(default_factory=lambda: training.Config(dense=True,
                                                                                         equal_time=True))
    """Settings of the dense counterpart's training for the MoE run's time (--dense --equal-time)."""
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
                                   ("dense", config.dense_training, "training_dense"),
                                   ("dense_time", config.dense_time_training, "training_dense_time")):
        trained[name] = run_step(training.main, replace(settings, dataset_path=dataset.path, output_dir=out / folder,
                                                        **shared),
                                 training.Nano3PretrainCheckpoint, inputs=[dataset], force=config.force)
    results = run_step(evaluation.main,
                       replace(config.evaluation, checkpoint_path=trained["moe"].path,
                               dense_checkpoint_path=trained["dense"].path,
                               dense_time_checkpoint_path=trained["dense_time"].path, dataset_path=dataset.path,
                               output_dir=out / "evaluation", **shared),
                       evaluation.Nano3PretrainResults, inputs=list(trained.values()), force=config.force)
    return {"pretraindataset": dataset, "nano3pretraincheckpoint": trained["moe"],
            "nano3pretraincheckpoint_dense": trained["dense"],
            "nano3pretraincheckpoint_dense_time": trained["dense_time"], "nano3pretrainresults": results}


if __name__ == "__main__":
    run(main)
