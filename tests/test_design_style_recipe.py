"""A recipe written the way docs/design.md writes steps, outside the package, piped with real processes.

Three stand-alone scripts in a temporary folder (data curation, training, evaluation), each a tyro
`Config` + `main` that builds its artifact with `Artifact`, shrinks its sizes with `apply_scale` and
prints `print_complete({"<step name>": artifact})`: the key is the step's name, not the artifact's
type, and the next step still finds its input on stdin by type. Inputs are loaded with the documented
`Cls.load(path=..., tracked_artifact=..., scale=...)`.
"""

import json
import os
import subprocess
import textwrap
from pathlib import Path

from conftest import PYTHON

ARTIFACTS = '''
from pydantic import Field

from nemotron.artifact import Artifact, ArtifactPath


class Samples(Artifact):
    train_path: ArtifactPath
    heldout_path: ArtifactPath
    num_train: int = Field(gt=0)


class LineFit(Artifact):
    weights_path: ArtifactPath


class FitReport(Artifact):
    heldout_mae: float
'''

DATA_CURATION = '''
"""Data curation: seeded noisy samples of y = 2x + 1, every tenth one held out."""

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro
from artifacts import Samples

from nemotron.artifact import apply_scale, print_complete

FULL_SAMPLES = 200_000


@dataclass
class Config:
    output_dir: Path = Path("output/data_curation")
    scale: str = "tiny"
    seed: int = 0


def main(config: Config) -> None:
    rng = random.Random(config.seed)
    xs = [rng.uniform(-1, 1) for _ in range(apply_scale(FULL_SAMPLES, config.scale))]
    rows = [(x, 2 * x + 1 + rng.gauss(0, 0.05)) for x in xs]
    train, heldout = [r for i, r in enumerate(rows) if i % 10], rows[::10]
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.json").write_text(json.dumps(train))
    (out / "heldout.json").write_text(json.dumps(heldout))
    artifact = Samples(path=out, config=asdict(config), scale=config.scale, seed=config.seed,
                       train_path=out / "train.json", heldout_path=out / "heldout.json",
                       num_train=len(train)).save()
    print_complete({"data_curation": artifact})


if __name__ == "__main__":
    main(tyro.cli(Config))
'''

TRAINING = '''
"""Training: slope and intercept by gradient descent on the squared error."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro
from artifacts import LineFit, Samples

from nemotron.artifact import apply_scale, print_complete

FULL_STEPS = 20_000


@dataclass
class Config:
    dataset_path: Path | None = None
    dataset_artifact: str | None = None
    output_dir: Path = Path("output/training")
    lr: float = 0.5
    scale: str = "tiny"
    seed: int = 0


def main(config: Config) -> None:
    dataset = Samples.load(path=config.dataset_path, tracked_artifact=config.dataset_artifact, scale=config.scale)
    rows = json.loads(dataset.train_path.read_text())
    slope = intercept = 0.0
    for _ in range(apply_scale(FULL_STEPS, config.scale)):  # full-batch gradient descent on the squared error
        errors = [(slope * x + intercept - y, x) for x, y in rows]
        slope -= config.lr * 2 * sum(e * x for e, x in errors) / len(rows)
        intercept -= config.lr * 2 * sum(e for e, _ in errors) / len(rows)
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "weights.json").write_text(json.dumps({"slope": slope, "intercept": intercept}))
    model = LineFit(path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=[dataset],
                    weights_path=out / "weights.json", metrics={"train_rows": len(rows)}).save()
    print_complete({"training": model})


if __name__ == "__main__":
    main(tyro.cli(Config))
'''

EVALUATION = '''
"""Evaluation: mean absolute error of the fitted line on the held-out samples."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import tyro
from artifacts import FitReport, LineFit, Samples

from nemotron.artifact import print_complete


@dataclass
class Config:
    model_path: Path | None = None
    model_artifact: str | None = None
    dataset_path: Path | None = None
    dataset_artifact: str | None = None
    output_dir: Path = Path("output/evaluation")
    scale: str = "tiny"
    seed: int = 0


def main(config: Config) -> None:
    model = LineFit.load(path=config.model_path, tracked_artifact=config.model_artifact, scale=config.scale)
    dataset = Samples.load(path=config.dataset_path, tracked_artifact=config.dataset_artifact, scale=config.scale)
    weights = json.loads(model.weights_path.read_text())
    heldout = json.loads(dataset.heldout_path.read_text())
    mae = sum(abs(weights["slope"] * x + weights["intercept"] - y) for x, y in heldout) / len(heldout)
    report = FitReport(path=config.output_dir, config=asdict(config), scale=config.scale, seed=config.seed,
                       inputs=[model, dataset], heldout_mae=mae, metrics={"heldout_rows": len(heldout)}).save()
    print_complete({"evaluation": report})


if __name__ == "__main__":
    main(tyro.cli(Config))
'''


def write_recipe(folder: Path) -> None:
    for name, text in [("artifacts", ARTIFACTS), ("data_curation", DATA_CURATION), ("training", TRAINING),
                       ("evaluation", EVALUATION)]:
        (folder / f"{name}.py").write_text(textwrap.dedent(text).lstrip())


def sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, env=dict(os.environ))


def test_a_recipe_in_the_design_style_pipes_together_unchanged(tmp_path):
    write_recipe(tmp_path)
    proc = sh(f"{PYTHON} data_curation.py | {PYTHON} training.py | {PYTHON} evaluation.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # one JSON document: every step's artifact, passed along the pipe
    assert set(out) == {"data_curation", "training", "evaluation"}
    data, model, report = out["data_curation"], out["training"], out["evaluation"]
    assert (data["type"], model["type"], report["type"]) == ("samples", "linefit", "fitreport")
    assert data["num_train"] == 1800 and model["metrics"]["train_rows"] == 1800  # apply_scale: 1% of 200k
    assert report["heldout_mae"] < 0.06  # the noise is N(0, 0.05): its MAE is 0.04

    # Lineage on the consumers: evaluation <- (training, data curation), training <- data curation.
    assert [(i["type"], i["digest"]) for i in report["inputs"]] == [
        ("linefit", model["digest"]), ("samples", data["digest"])]
    assert [(i["type"], i["digest"]) for i in model["inputs"]] == [("samples", data["digest"])]
    lineage = sh(f"{PYTHON} -m nemotron.artifact lineage {report['path']}", tmp_path)
    assert lineage.returncode == 0, lineage.stderr
    assert [line.split()[0] for line in lineage.stdout.splitlines()] == ["fitreport", "linefit", "samples",
                                                                         "samples"]
    verify = sh(f"{PYTHON} -m nemotron.artifact verify {report['path']}", tmp_path)
    assert verify.returncode == 0, verify.stderr

    # The same steps by explicit path give the same artifacts (same digests) as the pipe.
    by_path = sh(f"{PYTHON} evaluation.py --model-path output/training --dataset-path output/data_curation "
                 "--output-dir output/evaluation_again", tmp_path)
    assert by_path.returncode == 0, by_path.stderr
    assert json.loads(by_path.stdout)["evaluation"]["digest"] == report["digest"]
