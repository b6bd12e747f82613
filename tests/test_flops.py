"""Training FLOPs per token (nemotron.models.flops) against counts done by hand on small shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nemotron.models import nano2, nano3
from nemotron.models.flops import training_flops

SMALL = dict(hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
             mamba_num_heads=2, mamba_head_dim=8, ssm_state_size=4, n_groups=1, conv_kernel=4, chunk_size=8)


def test_hybrid_count_matches_a_hand_count():
    config = nano2.build_config("tiny", 64, hybrid_override_pattern="M*-", **SMALL)
    flops = training_flops(config, seq_len=16)
    # Mamba: in_proj 16 x (16 inner + 24 conv channels (16 + 2 x 4 for B, C) + 2 heads) = 672, conv1d 24 x 4 = 96,
    # out_proj 16 x 16 = 256; attention: q 16 x 16, k and v 16 x 8, o 16 x 16 = 768; MLP 2 x 16 x 32 = 1024;
    # the output head 64 x 16 = 1024; the input embedding (64 x 16) is not counted.
    assert flops.matmul_weights == 672 + 96 + 256 + 768 + 1024 + 1024
    assert flops.matmul == 6 * 3840
    assert flops.attention == 12 * 2 * 8 * 16  # one attention layer: 12 x heads x head_dim x seq_len
    # Scan, chunk Q = 8: Q N G = 8 x 4 x 1, Q H P = 8 x 2 x 8, 2 H P N = 2 x 2 x 8 x 4.
    assert flops.mamba_scan == 6 * (32 + 128 + 128)
    assert flops.per_token == 23040 + 3072 + 1728


def test_the_chunk_is_never_longer_than_the_window():
    config = nano2.build_config("tiny", 64, hybrid_override_pattern="M", **SMALL)
    # seq_len 4 < chunk_size 8: Q = 4, so 6 x (4 x 4 x 1 + 4 x 2 x 8 + 2 x 2 x 8 x 4)
    assert training_flops(config, seq_len=4).mamba_scan == 6 * (16 + 64 + 128)
    assert training_flops(config, seq_len=4).attention == 0


def test_moe_layers_count_their_active_experts_only():
    config = nano3.build_config("tiny", 64, hybrid_override_pattern="E", hidden_size=16, n_routed_experts=4,
                                num_experts_per_tok=2, moe_intermediate_size=8,
                                moe_shared_expert_intermediate_size=16, n_group=1, topk_group=1)
    # router 4 x 16; shared expert 2 x 16 x 16; routed experts 4 x (8 x 16 + 16 x 8), 2 of 4 active; head 64 x 16
    assert training_flops(config, seq_len=16).matmul_weights == 64 + 512 + 1024 * 2 / 4 + 1024


def test_nano2_tiny_is_the_count_the_readme_gives():
    flops = training_flops(nano2.build_config("tiny", 4096), seq_len=256)
    assert (flops.matmul_weights, flops.attention, flops.mamba_scan) == (939648, 393216, 153600)


@pytest.mark.slow
@pytest.mark.bench  # a benchmark's own run (~20 s each): make bench-check and CI run it
def test_bench_mfu_quick_ends_with_its_figures_as_json():
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mfu.py"
    done = subprocess.run([sys.executable, str(bench), "--quick", "--device", "cpu", "--threads", "1"],
                          capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["flops_per_token"] == training_flops(nano2.build_config("tiny", 4096), 64).per_token
    assert figures["mfu"] > 0 and figures["speedup"] > 0 and figures["peak_flops"] > 0
    assert figures["mfu"] == pytest.approx(figures["achieved_flops"] / figures["peak_flops"])


@pytest.mark.slow
@pytest.mark.bench  # a benchmark's own run (~20 s each): make bench-check and CI run it
def test_bench_mfu_says_a_sides_error_in_one_line(tmp_path):
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mfu.py"
    done = subprocess.run([sys.executable, str(bench), "--quick", "--device", "cpu", "--threads", "1",
                           "--dataset-path", str(tmp_path / "missing")], capture_output=True, text=True)
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: the recipe side: {tmp_path / 'missing'} does not exist; "
                                                "check the path"], done.stderr


@pytest.mark.slow
@pytest.mark.bench  # two curations and two short training runs: make bench-check runs it
def test_bench_mfu_before_times_the_real_step_of_both_trees():
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mfu.py"
    done = subprocess.run([sys.executable, str(bench), "--before", "HEAD", "--quick"],
                          capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = figures["before_seconds_per_step"], figures["after_seconds_per_step"]
    assert figures["steps"] == 4 and len(before) == len(after) == 1 and min(before + after) > 0
    assert figures["after_over_before"] > 0


def test_bench_mfu_before_refuses_an_unknown_revision_in_one_line():
    bench = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_mfu.py"
    done = subprocess.run([sys.executable, str(bench), "--before", "no-such-rev", "--quick"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: --before no-such-rev: git archive failed") and "give a commit" in line
