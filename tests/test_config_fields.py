"""A Config field says where it is declared whether it is part of what a step makes and of a run's identity.

`nemotron.artifact.fields`: locations by name (`*_dir`, `*_path`, `*_artifact`), `execution(...)` (out of
the digest and the run identity), `bookkeeping(...)` (out of the run identity only). These tests keep
the declarations and their two readers in agreement: the digest, which sees only metadata.json and so
knows execution fields by name, and `run_settings`, which reads the markers off the dataclass.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from nemotron.artifact.digest import without_locations
from nemotron.artifact.fields import BOOKKEEPING, EXECUTION, EXECUTION_KEYS, bookkeeping, execution, role
from nemotron.data_prep.settings import CurationSettings, SFTCurationSettings
from nemotron.evaluation.settings import EvaluationSettings
from nemotron.training.run import run_settings
from nemotron.training.settings import TrainingSettings

SRC = Path(__file__).resolve().parents[1] / "src" / "nemotron"
TRAINING_STEPS = [
    "nemotron.recipes.nano2.stage0_pretrain.training", "nemotron.recipes.nano2.stage1_sft.training",
    "nemotron.recipes.nano2.stage2_alignment.training", "nemotron.recipes.nano3.stage0_pretrain.training",
    "nemotron.recipes.nano3.stage1_sft.training", "nemotron.recipes.nano3.stage2_rl.training",
]
CURATION_STEPS = [
    "nemotron.recipes.nano2.stage0_pretrain.data_curation", "nemotron.recipes.nano2.stage2_alignment.data_curation",
    *(f"nemotron.recipes.post_training_data.{step}" for step in ("normalize", "pools", "score", "embed_select")),
]
SFT_CURATION_STEPS = [f"nemotron.recipes.{recipe}.stage1_sft.data_curation" for recipe in ("nano2", "nano3")]


def class_fields(path: Path):
    """(class name, field name, marker called or None) of every annotated class attribute in a file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                value = item.value
                marker = value.func.id if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) else None
                yield node.name, item.target.id, marker


SETTINGS = [SRC / layer / "settings.py" for layer in ("data_prep", "training", "evaluation")]  # the bases steps inherit


@pytest.mark.parametrize("path", sorted((SRC / "recipes").rglob("*.py")) + SETTINGS,
                         ids=lambda p: str(p.relative_to(SRC)))
def test_execution_fields_are_declared_as_such_and_known_to_the_digest(path):
    for cls, name, marker in class_fields(path):
        if marker == "execution":
            assert name in EXECUTION_KEYS, f"{path}: {cls}.{name} is execution(...) but the digest keeps it"
        elif name in EXECUTION_KEYS:
            pytest.fail(f"{path}: {cls}.{name} is left out of the digest by name; declare it execution(...)")


@pytest.mark.parametrize(("module", "settings"), [(m, TrainingSettings) for m in TRAINING_STEPS]
                         + [(m.replace(".training", ".evaluation"), EvaluationSettings) for m in TRAINING_STEPS]
                         + [(m, CurationSettings) for m in CURATION_STEPS]
                         + [(m, SFTCurationSettings) for m in SFT_CURATION_STEPS])
def test_a_step_keeps_the_markers_of_the_settings_it_overrides(module, settings):
    config = importlib.import_module(module).Config
    assert issubclass(config, settings), f"{module}: Config does not inherit {settings.__name__}"
    base = {f.name: role(f) for f in dataclasses.fields(settings)}
    for f in dataclasses.fields(config):
        if f.name in base:
            assert role(f) == base[f.name], f"{module}: Config.{f.name} overrides a {base[f.name]} field without it"


def test_run_identity_and_digest_read_the_declarations():
    @dataclasses.dataclass
    class Config:
        lr: float = 1e-3
        dataset_path: str = "runs/a"
        num_threads: int | None = execution(None)
        eval_every: int = bookkeeping(20)

    config = Config()
    assert [role(f) for f in dataclasses.fields(config)] == [None, None, EXECUTION, BOOKKEEPING]
    assert run_settings(config) == {"lr": 1e-3}  # locations, execution and bookkeeping may change on resume
    # The digest drops locations and execution fields but keeps bookkeeping: it changes what is saved.
    assert without_locations(dataclasses.asdict(config)) == {"lr": 1e-3, "eval_every": 20}


def test_a_resumed_run_may_change_every_marked_setting_of_a_training_step():
    from nemotron.recipes.nano2.stage1_sft.training import Config

    config = Config()
    changed = dataclasses.replace(config, eval_every=7, checkpoint_every=7, keep_last=9, num_threads=3,
                                  dry_run=True, nodes=2, output_dir=Path("elsewhere"))
    assert run_settings(changed) == run_settings(config)
    assert run_settings(dataclasses.replace(config, lr=config.lr * 2)) != run_settings(config)
