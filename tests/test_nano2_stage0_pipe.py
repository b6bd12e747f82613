"""Stage 0 as a literal shell pipe: data_curation | training | evaluation, each a separate process."""

import json
import os
import subprocess
import sys

import pytest

from builders import write_plays_blend  # tests/ is on sys.path under pytest

STAGE = "nemotron.recipes.nano2.stage0_pretrain"
PLAYS = {"hamlet", "macbeth"}


@pytest.mark.slow
def test_three_steps_pipe_through_a_shell_and_keep_lineage(tmp_path):
    write_plays_blend(tmp_path, PLAYS, [0.8, 0.2, 0.0])

    py = sys.executable
    pipe = (
        f"{py} -m {STAGE}.data_curation --blend-path blend.json --vocab-size 512 --output-dir data"
        f" | {py} -m {STAGE}.training --steps 4 --seq-len 64 --micro-batch-size 4 --eval-every 2"
        f" --checkpoint-every 2 --output-dir train"
        f" | {py} -m {STAGE}.evaluation --output-dir eval"
    )
    proc = subprocess.run(
        pipe, shell=True, cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"}, executable="/bin/bash",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # one JSON document: the three artifacts, passed through
    assert list(out) == ["pretraindataset", "pretraincheckpoint", "pretrainresults"]
    dataset, checkpoint, results = out.values()
    assert [(i["type"], i["digest"]) for i in checkpoint["inputs"]] == [("pretraindataset", dataset["digest"])]
    assert ("pretraincheckpoint", checkpoint["digest"]) in [(i["type"], i["digest"]) for i in results["inputs"]]
    assert results["metrics"]["bits_per_byte"] > 0 and checkpoint["steps"] == 4

    lineage = subprocess.run(
        [py, "-m", "nemotron.artifact", "lineage", str(tmp_path / "eval")], capture_output=True, text=True
    )
    types = [line.split()[0] for line in lineage.stdout.splitlines()]
    assert types[:3] == ["pretrainresults", "pretraincheckpoint", "pretraindataset"] and "source" in types
    assert str(tmp_path / "scenes.jsonl") in lineage.stdout
