"""nano2 at scale: the recipe hands training to Megatron-Bridge, and says so in one line when it cannot.

Megatron-Bridge cannot be installed on these CPU machines (CUDA, Transformer Engine), so these tests
check what a user does before a cluster: the dry-run plan of every stage (real data prepared here, from a
blend of two plays rather than the whole corpus, and run folders whose overrides are checked against the
Megatron-Bridge reference), and the one-line refusals.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from builders import write_plays_blend  # tests/ is on sys.path under pytest

RECIPE = [sys.executable, "-m", "nemotron.recipes.nano2"]
CLUSTER = ["--data-root", "s3://bucket/prefix", "--nodes", "4", "--gpus-per-node", "8"]


@pytest.mark.slow
def test_full_scale_dry_run_prints_a_complete_plan_for_every_stage(tmp_path):
    # The user's own blend (two plays: curating all of Shakespeare is test_nano2_stage0_data's job), and
    # tiny's 2,500 skill problems instead of full's 100,000 (25 of this test's 40 s went to making them).
    blend = write_plays_blend(tmp_path, {"hamlet", "macbeth"}, [0.8, 0.1, 0.1])
    out = tmp_path / "nano2"
    result = subprocess.run([*RECIPE, "--scale", "full", "--dry-run", *CLUSTER, "--output-dir", str(out),
                             "--stage0.data-curation.blend-path", str(blend),
                             "--stage1.data-curation.skill-problems", "2500"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = json.loads(result.stdout)
    assert {"pretraindataset", "stage0_run", "sftdataset", "stage1_run"} <= set(printed)
    for stage, recipe in (("stage0_pretrain", "pretrain"), ("stage1_sft", "sft")):
        run_dir = out / stage / "training" / "megatron_bridge"
        plan = json.loads((run_dir / "plan.json").read_text())
        assert plan["recipe_function"] == f"nemotron_nano_9b_v2_{recipe}_2gpu_h100_bf16_config"
        assert f"{plan['recipe_module']}.{plan['recipe_function']}" in result.stderr
        overrides = yaml.safe_load((run_dir / "overrides.yaml").read_text())
        assert overrides["train"]["global_batch_size"] % (4 * 8 // 2) == 0  # data-parallel ranks at TP 2
        assert (run_dir / "sbatch.sh").read_text().count("--nodes") >= 1
        artifact = json.loads((out / stage / "training" / "metadata.json").read_text())
        assert artifact["type"] == "megatronbridgerun" and artifact["launched"] is False
    stage0 = yaml.safe_load((out / "stage0_pretrain/training/megatron_bridge/overrides.yaml").read_text())
    assert all(p.startswith("s3://bucket/prefix/") for p in stage0["dataset"]["blend_per_split"][0][0])
    # Each step's own schedule: stage 0 warmup-stable-decay (its default, decay over the last 20%), SFT cosine.
    iters = stage0["train"]["train_iters"]
    assert stage0["scheduler"] == {"lr_warmup_iters": iters // 10, "lr_decay_iters": iters, "lr_decay_style": "WSD",
                                   "lr_wsd_decay_style": "linear", "lr_wsd_decay_iters": round(0.2 * iters)}
    stage1 = yaml.safe_load((out / "stage1_sft/training/megatron_bridge/overrides.yaml").read_text())
    assert stage1["scheduler"]["lr_decay_style"] == "cosine" and "lr_wsd_decay_iters" not in stage1["scheduler"]
    stage0_run = json.loads((out / "stage0_pretrain/training/metadata.json").read_text())
    assert stage1["checkpoint"]["pretrained_checkpoint"] == stage0_run["checkpoint_location"]
    assert "Stage 2 (DPO) at scale runs on NeMo-RL" in result.stderr
    assert not (out / "stage0_pretrain" / "evaluation").exists()  # nothing was trained here to evaluate


@pytest.mark.parametrize(
    "flags, message",
    [
        (CLUSTER, "Megatron-Bridge is not installed; on a CUDA machine"),  # no --dry-run: it would launch
        (["--dry-run"], "needs --data-root, --nodes, --gpus-per-node"),
    ],
)
def test_without_megatron_bridge_or_cluster_flags_the_recipe_stops_in_one_line_before_any_work(
    tmp_path, flags, message
):
    out = tmp_path / "nano2"
    result = subprocess.run([*RECIPE, "--scale", "full", *flags, "--output-dir", str(out)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert not out.exists()


def test_dpo_at_scale_is_refused_with_the_engine_that_would_run_it(tmp_path):
    from nemotron.errors import NemotronError
    from nemotron.recipes.nano2.stage2_alignment.training import Config, main

    with pytest.raises(NemotronError, match=r"NeMo-RL .* needs the stage-1 model as a Hugging Face folder"):
        main(Config(scale="full", output_dir=tmp_path / "dpo"))
    assert not (tmp_path / "dpo").exists()
