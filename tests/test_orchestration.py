"""run_step: skip a finished step, resume an interrupted one, start a replaced one fresh."""

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


def test_a_changed_setting_is_named_with_old_and_new_values_before_the_step_is_replaced(tmp_path, capsys):
    """A newcomer re-running with another setting is told which key changed, and that the run is replaced."""
    run_step(train, Config(output_dir=tmp_path / "train"), Trained)
    capsys.readouterr()
    again = run_step(train, Config(output_dir=tmp_path / "train", lr=2.0), Trained)
    stderr = capsys.readouterr().err
    assert "settings changed" in stderr and "lr 1.0 -> 2.0" in stderr and "will be replaced" in stderr
    assert "deleting the finished run's checkpoints" in stderr
    assert again.config["lr"] == 2.0
    run_step(train, Config(output_dir=tmp_path / "train", lr=2.0), Trained, force=True)
    assert "(--force): the finished run in" in capsys.readouterr().err


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
