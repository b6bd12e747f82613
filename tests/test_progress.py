"""Progress bars a person can read (`nemotron.progress`): live on a terminal, plain lines in a log.

A bar written to a file once held one line of thousands of carriage-return updates (55 KB a training bar
in `make demo > log`); in a log the bar is now a line every `PLAIN_INTERVAL` seconds and one at the end.
"""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

from tqdm import tqdm

from nemotron.progress import PLAIN_INTERVAL, PlainBar, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_bar_is_tqdms_live_bar():
    bar = progress_bar(range(3), desc="train", file=Terminal())
    assert type(bar) is tqdm and not isinstance(bar, PlainBar)
    list(bar)
    assert "\r" in bar.fp.getvalue()  # redrawn in place, as before


def test_in_a_file_a_training_bar_is_a_few_plain_lines_with_rate_time_left_and_loss(tmp_path):
    """stderr redirected to a file, a real process: 3 s of steps at a 1 s interval give about 3 lines, each
    with the count, rate, time left and loss; no carriage return; the last line is the last step's."""
    script = textwrap.dedent("""
        import time
        import nemotron.progress
        nemotron.progress.PLAIN_INTERVAL = 1.0  # a minute's worth of 10 s lines, in 3 s
        from nemotron.training.metrics import TrainingProgress
        with TrainingProgress(300, description="train") as bar:
            for step in range(300):
                time.sleep(0.01)
                bar.update(1, 512, 5.0 - step / 100)
                if step == 150:
                    bar.write("evaluation at step 150")
    """)
    log = tmp_path / "stderr.log"
    with open(log, "w") as stderr:
        subprocess.run([sys.executable, "-c", script], stderr=stderr, check=True, timeout=120)
    text = log.read_text()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text
    assert "evaluation at step 150" in lines
    bars = [line for line in lines if line.startswith("train: ")]
    assert 2 <= len(bars) <= 6, lines  # ~3 s / 1 s, and the closing line
    assert all("it/s" in line and "left" in line and "loss=" in line for line in bars)
    assert bars[-1].startswith("train: 300/300 it (100%)") and "loss=2.0100" in bars[-1]
    assert max(len(line) for line in lines) < 200


def test_a_plain_bar_that_ends_within_its_interval_says_one_line_and_a_quick_one_none():
    log = io.StringIO()
    for _ in progress_bar(range(1000), desc="quality filters", leave=False, file=log):
        pass
    assert log.getvalue().count("\n") == 1 and log.getvalue().startswith("quality filters: 1000/1000 it (100%)")
    quiet = io.StringIO()
    for _ in progress_bar(range(1000), desc="writing", delay=2.0, file=quiet):  # tqdm's delay: nothing if quick
        pass
    assert quiet.getvalue() == ""
    assert PLAIN_INTERVAL == 10.0  # the ~10 s the issue asks for


def test_tqdm_s_disable_none_still_shows_the_plain_bar_in_a_log():
    log = io.StringIO()
    list(progress_bar(iter(range(5)), desc="near dedup", disable=None, file=log))  # no total: no time left
    assert log.getvalue().startswith("near dedup: 5 it, ") and "\r" not in log.getvalue()


def test_a_library_s_bar_in_a_log_is_plain_lines_and_other_text_passes_through(monkeypatch):
    """`plain_stderr` (held by nemotron.cli around every step): lm-eval's, datasets' and transformers' bars
    are tqdm's own, redrawn with '\\r'; in a log each is a line per interval and its end, a quick one none."""
    import time

    import nemotron.progress

    monkeypatch.setattr(nemotron.progress, "PLAIN_INTERVAL", 0.2)
    monkeypatch.setattr(nemotron.progress, "QUICK_BAR", 0.1)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    with nemotron.progress.plain_stderr():
        print("loading", file=sys.stderr)
        list(tqdm(range(50)))  # 'Generating test split' style: over at once, nothing to say
        for _ in tqdm(range(10), desc="Running loglikelihood requests"):
            time.sleep(0.06)
        for _ in tqdm(range(3), desc="cleared", leave=False):
            time.sleep(0.06)
        sys.stderr.write("mmlu: acc 0.400 ")
        sys.stderr.write("(n=10)\n")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and lines[0] == "loading" and lines[-1] == "mmlu: acc 0.400 (n=10)"
    requests = [line for line in lines if line.startswith("Running loglikelihood requests")]
    assert 2 <= len(requests) <= 5 and "10/10" in requests[-1]  # ~0.6 s at 0.2 s, and the end
    assert not any("50/50" in line for line in lines)
    assert len(lines) <= 10


def test_a_long_data_prep_report_is_one_stage_a_line(capsys):
    from nemotron.data_prep.progress import LINE_WIDTH, LiveProgress

    progress = LiveProgress("data_prep", total=2)
    progress.line = lambda: "data_prep: 2/2 items | " + " | ".join(f"stage{i}: " + "counts " * 15 for i in range(5))
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "data_prep: 2/2 items" and len(lines) == 6
    assert all(len(line) <= LINE_WIDTH for line in lines)
