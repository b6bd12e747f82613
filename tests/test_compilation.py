"""`--compile off | on | auto` (nemotron.training.compilation): the flag, the saved value, auto's decision.

Nothing here compiles: what a compiled run trains is tested in tests/test_nano2_stage0_training.py, the
fused Mamba-2 scan in tests/test_mamba2_fused.py.
"""

from __future__ import annotations

from dataclasses import asdict

import pytest

from nemotron.cli import parse_flags
from nemotron.recipes.nano2.stage0_pretrain.training import STEPS, Config
from nemotron.training import compilation
from nemotron.training.compilation import choose


@pytest.mark.parametrize(("flags", "value"), [
    ([], False), (["--compile"], True), (["--compile", "on"], True), (["--compile", "off"], False),
    (["--compile", "auto"], "auto"), (["--compile", "--steps", "3"], True),
])
def test_the_flag_takes_on_off_auto_or_nothing_and_off_is_saved_as_before(flags, value):
    config = parse_flags(Config, flags)
    assert config.compile == value
    # A run without the flag saves `"compile": false`, as before the flag took words: its digest is unchanged.
    saved = asdict(config)["compile"]
    assert saved == value and type(saved) is type(value)


def test_a_word_other_than_on_off_auto_is_one_error_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_flags(Config, ["--compile", "yes"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and "--compile" in error and len(error.splitlines()) == 1


def test_on_and_off_are_what_they_say_whatever_was_measured():
    assert choose(True, "cpu", "tiny", 2, 1).compile and not choose(False, "cuda", "medium", 1, 10**6).compile


def test_auto_compiles_only_past_the_measured_break_even(monkeypatch):
    monkeypatch.setattr(compilation, "BREAK_EVEN", {("cpu", "tiny", 1): 900, ("cpu", "tiny", 2): 400,
                                                    ("cpu", "small", 2): None})
    assert not choose("auto", "cpu", "tiny", 2, 400).compile  # at the break-even itself: eager
    decision = choose("auto", "cpu", "tiny", 2, 401)
    assert decision.compile and "400" in decision.why and "2 threads" in decision.why
    assert not choose("auto", "cpu", "tiny", 1, 401).compile  # another thread count, another break-even
    assert choose("auto", "cpu", "tiny", 16, 401).compile  # unmeasured threads: the nearest measured (2)
    never = choose("auto", "cpu", "small", 2, 10**6)
    assert not never.compile and "does not pay" in never.why  # no faster compiled: never
    unmeasured = choose("auto", "cuda", "small", 1, 10**6)
    assert not unmeasured.compile and "no break-even measured" in unmeasured.why


def test_with_the_measured_table_auto_stays_eager_at_tiny():
    """The recipe at tiny must not get slower: its stage-0 steps are within every measured break-even."""
    for threads in (1, 2):
        assert not choose("auto", "cpu", "tiny", threads, STEPS["tiny"]).compile
