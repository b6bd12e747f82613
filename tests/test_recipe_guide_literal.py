"""The recipe guide's three steps, written the plain way, keep the artifact contract.

Three step files outside the package (in tmp_path), as a new user writes them from docs/add-a-recipe.md
and docs/design.md: plain `Path` fields on the artifacts, inputs loaded with
`Cls.load(path=..., tracked_artifact=...)`, `artifact.save()`, no `config=` and no `inputs=`; two steps
end with `run(main)`, the third prints its own `print_complete({...})`. Run as real processes in a shell
pipe, they get full lineage (each process records what it loaded), their resolved Config where `run`
parsed it, three distinct digests, and one line refusing a `Path` field that names nothing.
"""

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import PYTHON

ARTIFACTS = '''
from pathlib import Path

from nemotron.artifact import Artifact


class Samples(Artifact):
    train_path: Path
    heldout_path: Path
    num_train: int


class LineFit(Artifact):
    weights_path: Path
    slope: float


class FitReport(Artifact):
    heldout_mae: float
'''

DATA_CURATION = '''
"""Data curation: seeded noisy samples of y = 2x + 1, every n-th one held out."""

import json
import random
from dataclasses import dataclass
from pathlib import Path

from artifacts import Samples

from nemotron.artifact import apply_scale
from nemotron.cli import run


@dataclass
class Config:
    output_dir: Path = Path("output/data_curation")
    heldout_every: int = 10
    """Hold out every n-th sample (0: none)."""
    scale: str = "tiny"
    seed: int = 0


def main(config: Config) -> Samples:
    rng = random.Random(config.seed)
    xs = [rng.uniform(-1, 1) for _ in range(apply_scale(20_000, config.scale))]
    rows = [(x, 2 * x + 1 + rng.gauss(0, 0.05)) for x in xs]
    heldout = [r for i, r in enumerate(rows) if config.heldout_every and i % config.heldout_every == 0]
    train = [r for r in rows if r not in heldout]
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "train.json").write_text(json.dumps(train))
    if heldout:
        (out / "heldout.json").write_text(json.dumps(heldout))
    return Samples(path=out, scale=config.scale, seed=config.seed, train_path=out / "train.json",
                   heldout_path=out / "heldout.json", num_train=len(train)).save()


if __name__ == "__main__":
    run(main)
'''

TRAINING = '''
"""Training: slope and intercept by gradient descent on the squared error."""

import json
from dataclasses import dataclass
from pathlib import Path

from artifacts import LineFit, Samples

from nemotron.cli import run


@dataclass
class Config:
    dataset_path: Path | None = None
    dataset_artifact: str | None = None
    output_dir: Path = Path("output/training")
    lr: float = 0.5
    steps: int = 200
    scale: str = "tiny"
    seed: int = 0


def main(config: Config) -> LineFit:
    dataset = Samples.load(path=config.dataset_path, tracked_artifact=config.dataset_artifact)
    rows = json.loads(dataset.train_path.read_text())
    slope = intercept = 0.0
    for _ in range(config.steps):
        errors = [(slope * x + intercept - y, x) for x, y in rows]
        slope -= config.lr * 2 * sum(e * x for e, x in errors) / len(rows)
        intercept -= config.lr * 2 * sum(e for e, _ in errors) / len(rows)
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "weights.json").write_text(json.dumps({"slope": slope, "intercept": intercept}))
    return LineFit(path=out, scale=config.scale, seed=config.seed, weights_path=out / "weights.json",
                   slope=slope).save()


if __name__ == "__main__":
    run(main)
'''

EVALUATION = '''
"""Evaluation: mean absolute error of the fitted line on the held-out samples."""

import json
from dataclasses import dataclass
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
    model = LineFit.load(path=config.model_path, tracked_artifact=config.model_artifact)
    dataset = Samples.load(path=config.dataset_path, tracked_artifact=config.dataset_artifact)
    weights = json.loads(model.weights_path.read_text())
    heldout = json.loads(dataset.heldout_path.read_text())
    mae = sum(abs(weights["slope"] * x + weights["intercept"] - y) for x, y in heldout) / len(heldout)
    report = FitReport(path=config.output_dir, scale=config.scale, seed=config.seed, heldout_mae=mae).save()
    print_complete({"evaluation": report})


if __name__ == "__main__":
    main(tyro.cli(Config))
'''


def sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, env=dict(os.environ))


@pytest.mark.slow
def test_the_guide_s_three_steps_written_plainly_keep_lineage_digests_and_checks(tmp_path):
    for name, text in [("artifacts", ARTIFACTS), ("data_curation", DATA_CURATION), ("training", TRAINING),
                       ("evaluation", EVALUATION)]:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text).lstrip())

    proc = sh(f"{PYTHON} data_curation.py | {PYTHON} training.py | {PYTHON} evaluation.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    data, model, report = out["samples"], out["linefit"], out["evaluation"]

    # Lineage: each step recorded what its process loaded, though no step passed inputs=.
    assert [(i["type"], i["digest"]) for i in model["inputs"]] == [("samples", data["digest"])]
    assert [(i["type"], i["digest"]) for i in report["inputs"]] == [
        ("linefit", model["digest"]), ("samples", data["digest"])]
    lineage = sh(f"{PYTHON} -m nemotron.artifact lineage {report['path']}", tmp_path)
    assert lineage.returncode == 0, lineage.stderr
    assert [line.split()[0] for line in lineage.stdout.splitlines()] == ["fitreport", "linefit", "samples",
                                                                         "samples"]
    # The Config `run` parsed is the config of what it saved; the third step, outside `run`, records the
    # Config its `main` was called with.
    assert data["config"]["heldout_every"] == 10 and model["config"]["lr"] == 0.5
    assert report["config"]["output_dir"] == "output/evaluation"
    assert "training.py" in model["producer"]["command"] and model["producer"]["python_version"]
    assert model["producer"]["torch_version"] is None  # a step that never imported torch says so

    # Three artifacts, three digests (the digest covers the type and the typed fields).
    assert len({data["digest"], model["digest"], report["digest"]}) == 3
    assert sh(f"{PYTHON} -m nemotron.artifact verify {report['path']}", tmp_path).returncode == 0

    # A typed field edited in metadata.json: verify fails on the artifact and on everything made from it.
    meta = tmp_path / "output" / "training" / "metadata.json"
    edited = json.loads(meta.read_text())
    edited["slope"] = 3.0
    meta.write_text(json.dumps(edited, indent=2))
    verify = sh(f"{PYTHON} -m nemotron.artifact verify {model['path']}", tmp_path)
    assert verify.returncode == 1 and "a field of metadata.json was edited" in verify.stderr, verify.stderr
    assert sh(f"{PYTHON} -m nemotron.artifact verify {report['path']}", tmp_path).returncode == 1

    # A Path field that names nothing is saved recorded missing, with one warning line naming the field;
    # the step that reads it is refused in one line.
    made = sh(f"{PYTHON} data_curation.py --heldout-every 0 --output-dir output/no_heldout", tmp_path)
    assert made.returncode == 0 and json.loads(made.stdout)["samples"]["missing_files"] == ["heldout_path"]
    assert made.stderr.startswith("warning: Samples.heldout_path is "), made.stderr
    assert "heldout.json, which does not exist: recorded as missing" in made.stderr.splitlines()[0]
    bad = sh(f"{PYTHON} evaluation.py --model-path output/training --dataset-path output/no_heldout", tmp_path)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1, bad.stderr
    assert "samples.heldout_path was recorded missing when its step saved it" in bad.stderr
