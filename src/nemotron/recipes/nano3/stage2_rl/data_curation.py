"""Stage 2, step 1: the RL prompts and the checker's specification, as an artifact.

GRPO needs two things besides a policy: questions to sample answers to, and a checker that rewards
each answer. Both are data, so both are written here, before training, where a reader can see them:

  prompts   the SFT dataset's TRAINING problems (held-out ones never reach RL), passed through a stage
            list over work items (`nemotron.data_prep.stages`): read each problem record -> write it as
            one canonical JSON line, in order. The same questions, in the same order, as RL read from
            the SFT dataset before this step existed, so the RL run is unchanged (checked: its numbers)
  checker   checker.json: the reward function GRPO calls (`module:function`), what it reads from a
            completion and what it pays (`nemotron.data_prep.verifiable`)

Input: the `Nano3SFTCheckpoint` RL starts from (`--checkpoint-path`, or stdin); its `Nano3SFTDataset`
through the recorded lineage (or `--dataset-path`). Output: a `Nano3RLDataset`.

    python -m nemotron.recipes.nano3.stage2_rl.data_curation --checkpoint-path runs/nano3/stage1_sft/training
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from nemotron import atomic
from nemotron.artifact import mark_unfinished
from nemotron.artifact.upstream import load_upstream
from nemotron.cli import run
from nemotron.data_prep.blend import DataBlend
from nemotron.data_prep.settings import CurationSettings
from nemotron.data_prep.stages import (
    FilterSplitStage,
    ReadStage,
    TokenizeWriteStage,
    plan_stages,
    plan_work_items,
    run_pending,
)
from nemotron.data_prep.verifiable import FORMAT_BONUS
from nemotron.recipes.nano3.artifacts import Nano3RLDataset, Nano3SFTCheckpoint, Nano3SFTDataset

REWARD_FUNCTION = "nemotron.data_prep.verifiable:reward"


@dataclass
class Config(CurationSettings):
    """GRPO's prompts and checker specification."""

    checkpoint_path: Path | None = None
    """The Nano3SFTCheckpoint RL starts from (its dataset holds the problems); default: read it from stdin."""
    dataset_path: Path | None = None
    """The Nano3SFTDataset whose training problems become the prompts; default: the checkpoint's lineage."""
    output_dir: Path = Path("runs/nano3/stage2_rl/data_curation")


def prompt_stages() -> list:
    """read each problem record -> (its split is its folder's: train) -> one canonical JSON line each."""
    return [ReadStage(mode="chat"), FilterSplitStage(None), TokenizeWriteStage("jsonl", None, record="chat")]


def main(config: Config) -> Nano3RLDataset:
    sft = Nano3SFTCheckpoint.load(path=config.checkpoint_path, scale=config.scale, flag="--checkpoint-path")
    started = time.perf_counter()
    dataset = load_upstream(Nano3SFTDataset, path=config.dataset_path, tracked_artifact=None, scale=config.scale,
                            made_from=[sft], stdin=False, flag="--dataset-path")
    out = mark_unfinished(config.output_dir.resolve())

    # --- the stage list over the training problems: one work item, order kept ---
    source = Path(dataset.train_problems).resolve()
    blend = DataBlend.from_dict({"train": [{"path": str(source), "name": "train:problems"}]}, base_dir=out)
    items, fingerprint = plan_work_items(blend, source.stat().st_size + 1)
    plan = plan_stages(items, fingerprint, prompt_stages(), out / "prompts")
    run_pending(plan, "local", 1)
    files = sorted((plan.output_dir / "train").glob("*.jsonl"))
    num_prompts = sum(1 for path in files for line in path.read_text(encoding="utf-8").splitlines() if line.strip())

    # --- the checker's specification ---
    checker = {
        "reward_function": REWARD_FUNCTION,
        "answer": "the one integer after </think> (nemotron.data_prep.verifiable.final_answer)",
        "reward": f"1.0 when that integer is the problem's answer, plus {FORMAT_BONUS} for a well-formed "
                  "completion (thoughts closed, one integer after them)",
        "format_bonus": FORMAT_BONUS,
        "max_reward": 1.0 + FORMAT_BONUS,
    }
    atomic.write_text(out / "checker.json", json.dumps(checker, indent=2) + "\n")
    return Nano3RLDataset(
        path=out, config=asdict(config), scale=config.scale, seed=config.seed, inputs=[sft, dataset],
        prompt_files=files, checker=out / "checker.json", num_prompts=num_prompts,
        metrics={"num_prompts": num_prompts, "wall_seconds": time.perf_counter() - started},
    ).save()


if __name__ == "__main__":
    run(main)
