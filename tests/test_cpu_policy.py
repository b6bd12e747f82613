"""The CPU wait policy (nemotron/cpu.py): torch's OpenMP threads spin briefly at a barrier, then sleep,
instead of spinning 300,000 times, unless the user chose otherwise; measured by
benchmarks/bench_shared_cpu.py (issue 39).

Checked on the OpenMP runtime itself: libgomp prints the settings it read when OMP_DISPLAY_ENV=verbose
is set: its spin count is 1,000 under our default, 300,000 under its own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nemotron.cpu import POLICY, apply_cpu_policy

SPIN_DEFAULT = "300000"  # libgomp's GOMP_SPINCOUNT when no wait policy is set


def libgomp_settings(**env: str) -> dict[str, str]:
    """What libgomp read, in a fresh `python -c "import nemotron, torch"` (the order every step imports
    them in: `python -m nemotron...` runs the package first) with `env` on top of a clean environment."""
    base = {name: value for name, value in os.environ.items()
            if name not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "NEMOTRON_CPU_POLICY")}
    done = subprocess.run([sys.executable, "-c", "import nemotron, torch; torch.ones(4).sum()"],
                          env={**base, **env, "OMP_DISPLAY_ENV": "verbose"}, capture_output=True, text=True,
                          check=True)
    settings = {}
    for line in done.stderr.splitlines():
        name, sep, value = line.strip().partition(" = ")
        if sep and name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
            settings[name] = value.strip("'")
    assert "GOMP_SPINCOUNT" in settings, f"libgomp printed no settings; is torch built on GNU OpenMP?\n{done.stderr}"
    return settings


@pytest.mark.slow  # each starts a Python that imports torch
def test_a_step_process_spins_briefly_then_sleeps_by_default():
    assert libgomp_settings()["GOMP_SPINCOUNT"] == POLICY["GOMP_SPINCOUNT"] == "1000"


@pytest.mark.slow
def test_spin_restores_libgomps_own_spin_waiting():
    assert libgomp_settings(NEMOTRON_CPU_POLICY="spin")["GOMP_SPINCOUNT"] == SPIN_DEFAULT


@pytest.mark.slow
@pytest.mark.parametrize("users", [{"GOMP_SPINCOUNT": "12345"}, {"OMP_WAIT_POLICY": "ACTIVE"}])
def test_a_wait_setting_of_the_users_is_kept(users):
    settings = libgomp_settings(**users)
    if "GOMP_SPINCOUNT" in users:
        assert settings["GOMP_SPINCOUNT"] == "12345"
    else:  # ACTIVE: libgomp spins (its count becomes unbounded), never our brief 1,000
        assert settings == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": settings["GOMP_SPINCOUNT"]}
        assert settings["GOMP_SPINCOUNT"] not in ("0", "1000")


def test_the_policy_sets_only_what_the_user_left_unset():
    environ: dict[str, str] = {}
    assert apply_cpu_policy(environ) == POLICY and environ == POLICY
    assert apply_cpu_policy({"NEMOTRON_CPU_POLICY": "spin"}) == {}
    mine = {"OMP_WAIT_POLICY": "PASSIVE"}
    assert apply_cpu_policy(mine) == {} and mine == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_an_unknown_policy_is_one_clear_error():
    done = subprocess.run([sys.executable, "-c", "import nemotron"], capture_output=True, text=True,
                          env={**os.environ, "NEMOTRON_CPU_POLICY": "fast"})
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "error: NEMOTRON_CPU_POLICY='fast' is not one of share, spin; unset it for the default (share) "
        "or set spin for libgomp's own spin-waiting"]
