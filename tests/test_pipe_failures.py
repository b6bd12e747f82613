"""A pipe fails in one line: the step that failed prints it, the others go quietly.

A bad flag is one `error:` line (tyro's box reduced, its close match kept), exit 2, while `--help` is
the full help. A step whose reader has gone (a later step failed) exits 141 with nothing on stderr, as
`yes | head` does: whether it finds out while waiting for its own input or when it prints its artifact.
"""

import os
import subprocess
from dataclasses import dataclass

import pytest

from conftest import PYTHON, REPO
from nemotron.cli import EXIT_BAD_INPUT, parse_flags

HELLO = REPO / "examples" / "hello_pipeline"


@dataclass
class Config:
    steps: int = 1
    """How many steps."""
    scale: str = "tiny"


def test_a_bad_flag_is_one_error_line_with_the_close_match(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_flags(Config, ["--stepz", "3"])
    assert exit_.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: unrecognized options: --stepz, 3 (did you mean --steps?); see --help\n"
    with pytest.raises(SystemExit):
        parse_flags(Config, ["--steps", "many"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: error parsing --steps: invalid literal for int()")


def test_help_is_still_the_full_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_flags(Config, ["--help"], description="What the step does.")
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "What the step does." in out and "--steps INT" in out and "How many steps." in out


@pytest.mark.slow
def test_a_bad_flag_at_the_end_of_a_three_step_pipe_is_the_only_line_on_stderr(tmp_path):
    """count_words | fit_unigram | report_perplexity --stepz 3, with the worst timing made certain: the last
    step has failed before the middle one gets its input, and both are gone before the first one prints."""
    def step(name: str, *args: str, **streams) -> subprocess.Popen:
        return subprocess.Popen([PYTHON, str(HELLO / f"{name}.py"), *args], cwd=tmp_path, stderr=subprocess.PIPE,
                                **streams)

    last = step("report_perplexity", "--stepz", "3", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    into_middle, first_out = os.pipe()
    middle = step("fit_unigram", stdin=into_middle, stdout=last.stdin)
    os.close(into_middle)
    last.stdin.close()  # only the processes hold the pipe ends now, as in a shell
    last.wait(timeout=120)
    middle.wait(timeout=120)  # waiting on stdin, it sees its reader gone and leaves
    first = step("count_words", stdout=first_out)
    os.close(first_out)
    first.wait(timeout=120)  # it does its work, then finds no reader when it prints

    stderr = b"".join(p.stderr.read() for p in (first, middle, last)).decode()
    assert stderr == "error: unrecognized options: --stepz, 3; see --help\n"
    assert (first.returncode, middle.returncode, last.returncode) == (141, 141, EXIT_BAD_INPUT)
    assert not (tmp_path / "runs" / "hello" / "unigram" / "metadata.json").exists()  # the middle step never ran
