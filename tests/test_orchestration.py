"""run_step: skip a finished step, resume an interrupted one, start a replaced one fresh."""

import dataclasses
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from nemotron.artifact import Artifact, ArtifactPath
from nemotron.recipes.orchestration import run_step


@dataclass
class Config:
    output_dir: Path
    lr: float = 1.0


class Trained(Artifact):
    weights: ArtifactPath


calls: list[list[str]] = []


def train(config: Config) -> Trained:
    """A stand-in training step: records which checkpoints it found, then writes one."""
    ckpts = config.output_dir / "checkpoints"
    calls.append(sorted(p.name for p in ckpts.glob("*")) if ckpts.exists() else [])
    (ckpts / f"lr{config.lr}").mkdir(parents=True, exist_ok=True)
    (config.output_dir / "w.bin").write_text(str(config.lr))
    return Trained(path=config.output_dir, config=asdict(config), weights=config.output_dir / "w.bin").save()


def test_skip_resume_and_fresh_restart(tmp_path):
    calls.clear()
    cfg = Config(output_dir=tmp_path / "train")
    first = run_step(train, cfg, Trained)
    assert run_step(train, cfg, Trained).digest == first.digest and len(calls) == 1  # skipped

    # Interrupted (checkpoints, no artifact): the step runs and finds its checkpoints to resume from.
    (cfg.output_dir / "metadata.json").unlink()
    run_step(train, cfg, Trained)
    assert calls[-1] == ["lr1.0"]

    # Finished, then a setting changed: the old run's checkpoints are not offered for resuming.
    run_step(train, Config(output_dir=cfg.output_dir, lr=2.0), Trained)
    assert calls[-1] == []
    # --force on an up-to-date step also starts fresh.
    run_step(train, Config(output_dir=cfg.output_dir, lr=2.0), Trained, force=True)
    assert calls[-1] == []


def rerun_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("re-running")]


def test_a_changed_setting_is_named_with_old_and_new_values_in_one_line(tmp_path, capsys):
    """A newcomer re-running with another setting is told which key changed, and that the old run stays
    until the new one is complete."""
    run_step(train, Config(output_dir=tmp_path / "train"), Trained)
    capsys.readouterr()
    again = run_step(train, Config(output_dir=tmp_path / "train", lr=2.0), Trained)
    lines = rerun_lines(capsys.readouterr().err)
    assert len(lines) == 1 and "settings changed: lr 1.0 -> 2.0" in lines[0], lines
    assert "stays until the new one is complete" in lines[0]
    assert again.config["lr"] == 2.0 and again.path == (tmp_path / "train").resolve()
    run_step(train, Config(output_dir=tmp_path / "train", lr=2.0), Trained, force=True)
    lines = rerun_lines(capsys.readouterr().err)
    assert len(lines) == 1 and lines[0].startswith(f"re-running {tmp_path.name}/train: --force;"), lines


@dataclass
class Inner:
    vocab: int = 1
    tokenizer_dir: Path = Path("tok")
    workers: int = 1


@dataclass
class Nested:
    output_dir: Path
    dataset_path: Path = Path("data")
    num_threads: int = 1
    inner: Inner = dataclasses.field(default_factory=Inner)


def make_nested(config: Nested) -> Trained:
    calls.append(["nested"])
    (config.output_dir / "w.bin").write_text(str(config.inner.vocab))
    return Trained(path=config.output_dir, config=asdict(config), weights=config.output_dir / "w.bin").save()


def test_where_a_run_lives_is_not_part_of_it_at_any_depth(tmp_path, capsys):
    """A copied run folder, run with other locations and execution settings (nested ones too), is up to
    date; a nested content setting that changed is named with its dotted key."""
    calls.clear()
    run_step(make_nested, Nested(output_dir=tmp_path / "a" / "step"), Trained)
    shutil.copytree(tmp_path / "a", tmp_path / "copy")
    moved = Nested(output_dir=tmp_path / "copy" / "step", dataset_path=Path("elsewhere"), num_threads=4,
                   inner=Inner(tokenizer_dir=Path("other"), workers=8))
    capsys.readouterr()
    skipped = run_step(make_nested, moved, Trained)
    assert len(calls) == 1, capsys.readouterr().err
    assert skipped.path == (tmp_path / "copy" / "step").resolve()
    run_step(make_nested, dataclasses.replace(moved, inner=Inner(vocab=2)), Trained)
    assert rerun_lines(capsys.readouterr().err)[0].startswith(
        "re-running copy/step: settings changed: inner.vocab 1 -> 2;")  # the step named by its folder


@dataclass
class Downstream:
    output_dir: Path
    weights_path: Path = Path("w")


def evaluate(config: Downstream) -> Trained:
    (config.output_dir / "score.txt").write_text((Path(config.weights_path) / "w.bin").read_text())
    return Trained(path=config.output_dir, config=asdict(config), weights=config.output_dir / "score.txt",
                   inputs=[Trained.from_path(config.weights_path)]).save()


def test_an_upstream_digest_that_changed_is_named_with_its_type_and_both_short_digests(tmp_path, capsys):
    first = run_step(train, Config(output_dir=tmp_path / "train"), Trained)
    run_step(evaluate, Downstream(tmp_path / "eval", first.path), Trained, inputs=[first])
    second = run_step(train, Config(output_dir=tmp_path / "train", lr=2.0), Trained)
    capsys.readouterr()
    run_step(evaluate, Downstream(tmp_path / "eval", second.path), Trained, inputs=[second])
    lines = rerun_lines(capsys.readouterr().err)
    assert len(lines) == 1, lines
    assert f"input trained changed {first.digest[:12]} -> {second.digest[:12]}" in lines[0], lines


def broken(config: Config) -> Trained:
    """A training step that dies after its first checkpoint (as a killed run would)."""
    (config.output_dir / "checkpoints" / "step_1").mkdir(parents=True)
    (config.output_dir / "w.bin").write_text("half")
    raise RuntimeError("killed")


def test_a_rerun_that_dies_leaves_the_finished_artifact_verifiable_and_is_resumed(tmp_path):
    """The re-run is built beside the finished folder; dying midway leaves the old artifact whole, and the
    next run finds the re-run's checkpoints (same settings) and completes it in place of the old one."""
    calls.clear()
    cfg = Config(output_dir=tmp_path / "train")
    old = run_step(train, cfg, Trained)
    with pytest.raises(RuntimeError):
        run_step(broken, Config(output_dir=cfg.output_dir, lr=2.0), Trained)
    assert Trained.from_path(cfg.output_dir).digest == old.digest
    Trained.from_path(cfg.output_dir).verify()  # the half-written weights went elsewhere
    staged = [p.name for p in tmp_path.iterdir() if p.name != "train"]
    assert len(staged) == 1 and staged[0].startswith(".train.rerun-"), staged

    new = run_step(train, Config(output_dir=cfg.output_dir, lr=2.0), Trained)
    assert calls[-1] == ["step_1"]  # resumed from the staged re-run's checkpoint
    assert new.path == cfg.output_dir.resolve() and new.config["lr"] == 2.0
    assert new.config["output_dir"] == str(cfg.output_dir.resolve())  # not the staging folder
    assert Trained.from_path(cfg.output_dir).digest == new.digest != old.digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train"]  # staging and the old run are gone


@dataclass
class Curate:
    output_dir: Path
    threshold: float = 0.8


def curate(config: Curate) -> Trained:
    """A step that makes a nested artifact through run_step (as stage-0 curation makes its synthetic data)."""
    extra = run_step(train, Config(output_dir=config.output_dir / "synthetic"), Trained)
    (config.output_dir / "kept.txt").write_text(f"{config.threshold} {extra.digest}")
    return Trained(path=config.output_dir, config=asdict(config), weights=config.output_dir / "kept.txt",
                   inputs=[extra]).save()


def test_a_rerun_aside_reuses_the_finished_folder_s_nested_artifacts(tmp_path, capsys):
    """The nested artifact is copied into the staging folder, so its own run_step skips it; the finished
    folder's copy is left as it was until the swap."""
    calls.clear()
    first = run_step(curate, Curate(tmp_path / "curation"), Trained)
    again = run_step(curate, Curate(tmp_path / "curation", threshold=0.1), Trained)
    assert calls == [[]]  # the nested step ran once, for the first run
    assert "[skip] curation/synthetic" in capsys.readouterr().err  # named by its folder, as the report card does
    assert again.inputs == first.inputs and again.digest != first.digest
    assert Trained.from_path(tmp_path / "curation" / "synthetic").digest == first.inputs[0].digest


class Tokenized(Artifact):
    tokenizer_dir: ArtifactPath  # a file of another step's artifact


@dataclass
class Tokenize:
    output_dir: Path
    tokenizer_dir: Path = Path("tok")


def tokenize(config: Tokenize) -> Tokenized:
    calls.append(["tokenize"])
    return Tokenized(path=config.output_dir, config=asdict(config), tokenizer_dir=config.tokenizer_dir,
                     inputs=[Trained.from_path(config.tokenizer_dir.parent)]).save()


def test_a_moved_run_tree_is_up_to_date_even_where_a_field_names_a_file_of_a_sibling_step(tmp_path):
    """A field pointing into another step's folder is written `../step/...`, so `mv runs/a runs/b` keeps it."""
    calls.clear()
    upstream = run_step(train, Config(output_dir=tmp_path / "a" / "train"), Trained)
    cfg = Tokenize(output_dir=tmp_path / "a" / "tokenize", tokenizer_dir=upstream.weights)
    run_step(tokenize, cfg, Tokenized, inputs=[upstream])
    assert '"tokenizer_dir": "../train/w.bin"' in (cfg.output_dir / "metadata.json").read_text()
    (tmp_path / "a").rename(tmp_path / "b")
    moved = Trained.from_path(tmp_path / "b" / "train")
    again = run_step(tokenize, Tokenize(output_dir=tmp_path / "b" / "tokenize", tokenizer_dir=moved.weights),
                     Tokenized, inputs=[moved])
    assert calls == [[], ["tokenize"]] and again.tokenizer_dir == moved.weights  # skipped, reads the moved file


@pytest.mark.slow
def test_a_nested_flag_the_orchestrator_overwrites_is_refused_naming_the_top_level_flag(tmp_path):
    """`--stage0.training.seed 3` used to be accepted and ignored; now it is one line naming `--seed`."""
    import subprocess
    import sys

    def recipe(*flags: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "nemotron.recipes.nano2", "--output-dir", str(tmp_path / "nano2"), *flags]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    for flags, message in [
        (("--stage0.training.seed", "3"),
         "--stage0.training.seed is set by the orchestrator for every step; pass --seed"),
        (("--stage1.evaluation.output-dir", "x"), "--stage1.evaluation.output-dir is set by the orchestrator"),
        (("--stage2.training.checkpoint-path", "x"), "the orchestrator hands each step the outputs of the step before"),
    ]:
        result = recipe(*flags)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip()[7:]}"]
        assert message in result.stderr
    assert not (tmp_path / "nano2").exists()


def test_the_log_names_each_step_as_the_report_card_does(tmp_path):
    """Issue 59: nano3's MoE and dense runs of one training step were both `stage0_pretrain/training` in the
    log, and the benchmarks `nemotron/evaluation`; the log and the card now both name the output folder."""
    from nemotron.recipes.orchestration import BENCHMARKS_FOLDER, step_label
    from nemotron.recipes.report_card import step_name

    run = tmp_path / "nano3"
    assert step_label(run / "stage0_pretrain" / "training") == "stage0_pretrain/training"
    assert step_label(run / "stage0_pretrain" / "training_dense") == "stage0_pretrain/training_dense"
    assert step_label(run / BENCHMARKS_FOLDER) == "evaluation/benchmarks"
    staging = run / "stage0_pretrain" / ".training_dense.rerun-0123456789ab"  # a re-run, built aside
    assert step_label(staging) == "stage0_pretrain/training_dense"
    assert step_name({"path": str(run / "stage0_pretrain" / "training_dense")}) == "stage0_pretrain/training_dense"
