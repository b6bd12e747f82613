"""The design's recipe guide (design document "Adding a Model Training Recipe"), its three steps copied as written.

STEP_1, STEP_2 and STEP_3 are the guide's three code blocks, character for character, in a package laid
out as the guide lays it out (`{model_name}/stage0_pretrain/`, so `from .data_curation import Dataset`
imports). Each ends with a bare `tyro.cli(main)`, so its flags are `--config.scale` and so on. What the
guide leaves to the author is filled in below each block (AUTHOR_1..3: `curate_and_filter`, `save_data`,
`count_tokens`, `build_model`, `train`, `save_checkpoint`, `load_checkpoint`, `evaluate`), plus one line
the guide forgot: step 1 calls `field(...)` but imports only `dataclass`, so `from dataclasses import field`
is put on top of it.

The contract the guide's code gets without asking for it:
- the declared `valid_path` that step 1 never writes is recorded as missing (one warning line), not
  refused; a step that opens it is refused in one line (`Artifact.missing_files`);
- the resolved Config is recorded, and the artifact's scale and seed are the Config's;
- a `NemotronError` under the bare `tyro.cli(main)` is one line, and an input error names the flag given.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import PYTHON

SRC = str(Path(__file__).resolve().parents[1] / "src")

STEP_1 = '''
# src/nemotron/recipes/{model_name}/stage0_pretrain/data_curation.py
from dataclasses import dataclass
from pathlib import Path
import tyro
from pydantic import Field
from nemotron.artifact import Artifact, apply_scale, print_complete

@dataclass
class Config:
    output_dir: Path = Path("/workspace/outputs/{model}/stage0/data")
    sources: list[str] = field(default_factory=lambda: ["/data/pile"])
    quality_threshold: float = 0.7
    scale: str = "full"  # tiny/small/medium/full
    seed: int = 42

class Dataset(Artifact):
    """Output: Curated training dataset."""
    num_examples: int = Field(gt=0)
    num_tokens: int = Field(gt=0)
    train_path: Path
    valid_path: Path

def main(config: Config) -> Dataset:
    # 1. Setup and apply scale
    config.output_dir.mkdir(parents=True, exist_ok=True)
    actual_size = apply_scale(1_000_000, config.scale)

    # 2. Curate data (your logic here)
    train_data = curate_and_filter(config.sources, actual_size)

    # 3. Save data files
    train_path = config.output_dir / "train.parquet"
    save_data(train_data, train_path)

    # 4. Create and save artifact
    artifact = Dataset(
        path=config.output_dir,
        num_examples=len(train_data),
        num_tokens=count_tokens(train_data),
        train_path=train_path,
        valid_path=config.output_dir / "valid.parquet",
        metrics={"num_examples": len(train_data)},
    )
    artifact.save()
    print_complete({"data_curation": artifact})
    return artifact

if __name__ == "__main__":
    tyro.cli(main)
'''

STEP_2 = '''
# src/nemotron/recipes/{model_name}/stage0_pretrain/training.py
from dataclasses import dataclass
from pathlib import Path
import tyro
from pydantic import Field
from nemotron.artifact import Artifact, apply_scale, print_complete
from .data_curation import Dataset

@dataclass
class Config:
    # Inputs
    dataset_path: Path | None = None
    dataset_artifact: str | None = None

    # Outputs
    output_dir: Path = Path("/workspace/outputs/{model}/stage0/training")

    # Model hyperparameters
    hidden_size: int = 2048
    num_layers: int = 24
    learning_rate: float = 3e-4
    num_steps: int = 100_000
    scale: str = "full"
    seed: int = 42

class Checkpoint(Artifact):
    """Output: Trained model checkpoint."""
    num_steps: int = Field(gt=0)
    training_loss: float = Field(ge=0.0)
    checkpoint_path: Path

def main(config: Config) -> Checkpoint:
    # 1. Load dataset artifact
    dataset = Dataset.load(
        path=config.dataset_path,
        tracked_artifact=config.dataset_artifact
    )

    # 2. Apply scale and train
    actual_steps = apply_scale(config.num_steps, config.scale)
    model = build_model(config.hidden_size, config.num_layers)
    final_loss = train(model, dataset.train_path, actual_steps)

    # 3. Save checkpoint
    checkpoint_path = config.output_dir / "model.pt"
    save_checkpoint(model, checkpoint_path)

    # 4. Create and save artifact
    artifact = Checkpoint(
        path=config.output_dir,
        num_steps=actual_steps,
        training_loss=final_loss,
        checkpoint_path=checkpoint_path,
        metrics={"training_loss": final_loss},
    )
    artifact.save()
    print_complete({"training": artifact})
    return artifact

if __name__ == "__main__":
    tyro.cli(main)
'''

STEP_3 = '''
# src/nemotron/recipes/{model_name}/stage0_pretrain/evaluation.py
from dataclasses import dataclass, field
from pathlib import Path
import tyro
from nemotron.artifact import Artifact, print_complete
from .training import Checkpoint

@dataclass
class Config:
    checkpoint_path: Path | None = None
    checkpoint_artifact: str | None = None
    output_dir: Path = Path("/workspace/outputs/{model}/stage0/eval")
    benchmarks: list[str] = field(default_factory=lambda: ["mmlu", "hellaswag"])
    seed: int = 42

class Results(Artifact):
    """Output: Evaluation results."""
    benchmarks: list[str]

def main(config: Config) -> Results:
    # 1. Load checkpoint
    checkpoint = Checkpoint.load(
        path=config.checkpoint_path,
        tracked_artifact=config.checkpoint_artifact
    )

    # 2. Run evaluation
    model = load_checkpoint(checkpoint.checkpoint_path)
    metrics = {}
    for benchmark in config.benchmarks:
        metrics[benchmark] = evaluate(model, benchmark, config.seed)

    # 3. Save results
    artifact = Results(
        path=config.output_dir,
        benchmarks=config.benchmarks,
        metrics=metrics,
    )
    artifact.save()
    print_complete({"evaluation": artifact})
    return artifact

if __name__ == "__main__":
    tyro.cli(main)
'''

# What the guide leaves to the author ("your logic here"): small, deterministic, and real enough to check.
AUTHOR_1 = '''
import random

import pyarrow as pa
import pyarrow.parquet as pq

WORDS = "the a model data token train curate filter quality web code math".split()


def curate_and_filter(sources, size):
    rng = random.Random(size)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(size)]


def save_data(rows, path):
    pq.write_table(pa.table({"text": rows}), path)


def count_tokens(rows):
    return sum(len(row.split()) for row in rows)
'''

AUTHOR_2 = '''
import json

import pyarrow.parquet as pq


def build_model(hidden_size, num_layers):
    return {"hidden_size": hidden_size, "num_layers": num_layers, "mean_length": 0.0}


def train(model, train_path, steps):
    lengths = [len(t.split()) for t in pq.read_table(train_path)["text"].to_pylist()]
    target = sum(lengths) / len(lengths)
    for _ in range(steps):  # gradient descent on (w - mean length)^2
        model["mean_length"] -= 0.01 * 2 * (model["mean_length"] - target)
    return (model["mean_length"] - target) ** 2


def save_checkpoint(model, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model))
'''

AUTHOR_3 = '''
import json


def load_checkpoint(path):
    return json.loads(path.read_text())


def evaluate(model, benchmark, seed):
    return round(model["mean_length"] / (len(benchmark) + seed % 7), 6)
'''

MAIN_GUARD = 'if __name__ == "__main__":'


def write_step(folder: Path, guide: str, author: str, first_line: str = "") -> None:
    """The guide's block with the author's helpers above its `if __name__ == "__main__":` (no line changed)."""
    head, guard, tail = guide.lstrip().partition(MAIN_GUARD)
    name = guide.strip().splitlines()[0].rsplit("/", 1)[-1]
    (folder / name).write_text(first_line + head + author.lstrip() + "\n\n" + guard + tail)


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    stage = tmp_path / "guide_model" / "stage0_pretrain"
    stage.mkdir(parents=True)
    (tmp_path / "guide_model" / "__init__.py").write_text("")
    (stage / "__init__.py").write_text("")
    write_step(stage, STEP_1, AUTHOR_1, first_line="from dataclasses import field  # the guide forgot it\n")
    write_step(stage, STEP_2, AUTHOR_2)
    write_step(stage, STEP_3, AUTHOR_3)
    return tmp_path


def sh(cmd: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), SRC])}
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, env=env)


def step(name: str) -> str:
    return f"{PYTHON} -m guide_model.stage0_pretrain.{name}"


@pytest.mark.slow
def test_the_design_guide_s_three_steps_as_written_run_as_a_pipe(recipe):
    proc = sh(f"set -o pipefail; {step('data_curation')} --config.scale tiny --config.seed 7 "
              "--config.output-dir out/tiny/data | "
              f"{step('training')} --config.scale tiny --config.output-dir out/tiny/training | "
              f"{step('evaluation')} --config.output-dir out/tiny/eval", recipe)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    data, model, results = out["data_curation"], out["training"], out["evaluation"]
    assert len({data["digest"], model["digest"], results["digest"]}) == 3
    assert [i["digest"] for i in model["inputs"]] == [data["digest"]]
    assert [i["digest"] for i in results["inputs"]] == [model["digest"]]

    # The resolved Config is recorded; the artifact's scale and seed are the Config's, flags included.
    assert data["config"]["quality_threshold"] == 0.7 and data["config"]["sources"] == ["/data/pile"]
    assert (data["scale"], data["seed"], data["config"]["seed"]) == ("tiny", 7, 7)
    assert (model["scale"], model["seed"], model["num_steps"]) == ("tiny", 42, 1000)  # 1% of 100,000
    assert results["seed"] == 42 and results["benchmarks"] == ["mmlu", "hellaswag"]
    assert data["num_examples"] == 10_000  # apply_scale(1_000_000, "tiny"): 1%, capped at 10,000

    # valid_path was declared but never written: recorded missing, in one warning line, not refused.
    assert data["missing_files"] == ["valid_path"]
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: Dataset.valid_path")]
    assert len(warnings) == 1 and "recorded as missing" in warnings[0], proc.stderr
    assert sh(f"{PYTHON} -m nemotron.artifact verify out/tiny/eval", recipe).returncode == 0

    # A second run at another scale: diff names the scale (a field and a config key) and the config.
    small = sh(f"{step('data_curation')} --config.scale small --config.seed 7 --config.output-dir out/small/data",
               recipe)
    assert small.returncode == 0, small.stderr
    diff = sh(f"{PYTHON} -m nemotron.artifact diff out/tiny/data out/small/data", recipe)
    assert diff.returncode == 1, diff.stderr
    assert "first difference: data: scale tiny -> small" in diff.stdout, diff.stdout
    lines = [line.split() for line in diff.stdout.splitlines()]
    assert ["config", "scale:", "tiny", "->", "small"] in lines and ["fields", "num_examples:", "10000", "->",
                                                                      "100000", "(+90000)"] in lines
    assert ["scale:", "tiny", "->", "small"] in lines  # the artifact's own scale field, under "fields"


@pytest.mark.slow
def test_the_guide_s_steps_fail_in_one_line(recipe):
    made = sh(f"{step('data_curation')} --config.scale tiny --config.output-dir out/data", recipe)
    assert made.returncode == 0, made.stderr

    # An input path that is not an artifact: one line that names the flag as it was given.
    wrong = sh(f"{step('training')} --config.scale tiny --config.dataset-path out/nothing_here "
               "--config.output-dir out/training", recipe)
    assert wrong.returncode == 2 and wrong.stdout == "", wrong.stderr
    assert wrong.stderr.count("\n") == 1 and wrong.stderr.startswith("error: "), wrong.stderr
    assert "--config.dataset-path" in wrong.stderr

    # A NemotronError raised in the step's own code (an unknown scale, from apply_scale): one line.
    bad = sh(f"{step('data_curation')} --config.scale huge --config.output-dir out/huge", recipe)
    assert bad.returncode == 2 and bad.stderr == "error: unknown scale 'huge': use one of tiny, small, medium, full\n"

    # A step that reads the file recorded missing is refused in one line naming the field.
    read = sh(f"{PYTHON} -c 'import pyarrow.parquet as pq; from guide_model.stage0_pretrain.data_curation "
              "import Dataset; pq.read_table(Dataset.load(path=\"out/data\").valid_path)'", recipe)
    assert read.returncode == 2 and read.stderr.count("\n") == 1, read.stderr
    assert "dataset.valid_path was recorded missing when its step saved it" in read.stderr, read.stderr


def test_a_declared_file_never_written_is_recorded_missing_and_its_read_refused(tmp_path, capsys):
    from nemotron.artifact import Artifact
    from nemotron.errors import one_line

    class Split(Artifact):
        train_path: Path
        valid_path: Path

    (tmp_path / "train.txt").write_text("a\n")
    saved = Split(path=tmp_path, train_path=tmp_path / "train.txt", valid_path=tmp_path / "valid.txt").save()
    assert saved.missing_files == ["valid_path"] and list(saved.file_hashes) == ["train.txt"]
    assert capsys.readouterr().err.count("warning: Split.valid_path") == 1
    loaded = Split.load(path=tmp_path)
    try:
        loaded.valid_path.read_text()
    except FileNotFoundError as e:
        assert one_line(e).startswith(f"{tmp_path / 'metadata.json'}: split.valid_path was recorded missing")
    # Written later, it is still not vouched for; the train file's change is still caught.
    (tmp_path / "train.txt").write_text("b\n")
    with pytest.raises(Exception, match="train.txt changed"):
        Split.load(path=tmp_path).verify()
