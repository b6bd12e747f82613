"""The light install (`pip install -e .`, pyproject's base `dependencies`) runs the data stages without torch.

The test builds what that install gives: a fresh virtual environment (in its temporary folder) holding only
the closure of the base dependencies, read from pyproject.toml and the installed packages' own requirements,
each package linked in from this environment (so nothing is downloaded), torch not among them. In it, with
nemotron from this checkout, run the post-training CPU normalization (the shipped demo input) and the
data-prep pipeline: a BPE tokenizer, `run_pretrain_pipeline` to bin/idx, `run_rl_pipeline` to JSONL.
"""

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]

DATA_STAGES = '''
import importlib.util, json, sys
from pathlib import Path

from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_rl_pipeline
from nemotron.data_prep.tokenizer import train_tokenizer_on_files
from nemotron.recipes.post_training_data import normalize

out = Path(sys.argv[1])
normalized = normalize.main(normalize.Config(output_dir=out / "normalize"))
docs = out / "docs.jsonl"
docs.write_text("".join(json.dumps({"id": i, "text": f"document {i}: " + "the tide comes in " * (i % 7 + 1)}) + "\\n"
                        for i in range(60)))
tokenizer, _ = train_tokenizer_on_files(out / "tok", [docs], vocab_size=512)
blend = DataBlend(sources=[{"path": str(docs)}], split=[0.9, 0.1, 0.0])
pretrain = run_pretrain_pipeline(blend, out / "pretrain", tokenizer=tokenizer, work_item_bytes="4KB")
rl = run_rl_pipeline(blend, out / "rl")
print(json.dumps({"normalized": normalized.num_records, "tokens": pretrain.total_tokens, "records": rl.total_records,
                  "torch_installed": importlib.util.find_spec("torch") is not None}))
'''


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def base_closure() -> set[str]:
    """The distributions `pip install -e .` brings: the base dependencies and theirs, extras left out."""
    base = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    closure, todo = set(), [Requirement(r).name for r in base]
    while todo:
        name = canonical(todo.pop())
        if name not in closure:
            closure.add(name)
            todo += [req.name for req in map(Requirement, md.distribution(name).requires or [])
                     if req.marker is None or req.marker.evaluate({"extra": ""})]
    return closure


def light_environment(folder: Path, closure: set[str]) -> Path:
    """A virtual environment whose site-packages links each file and folder of the closure's distributions."""
    venv.create(folder, with_pip=False)
    [site] = list(folder.glob("lib/python*/site-packages"))
    for name in closure:
        dist = md.distribution(name)
        for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
            source = Path(dist.locate_file(top))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return folder / "bin" / "python"


@pytest.mark.slow
def test_the_base_install_runs_the_data_stages_without_torch(tmp_path):
    closure = base_closure()
    assert "torch" not in closure and {"pyarrow", "tokenizers", "datasets"} <= closure
    python = light_environment(tmp_path / "venv", closure)
    script = tmp_path / "data_stages.py"
    script.write_text(DATA_STAGES)
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run([str(python), str(script), str(tmp_path / "out")], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result == {"normalized": result["normalized"], "tokens": result["tokens"], "records": 60,
                      "torch_installed": False}
    assert result["normalized"] > 0 and result["tokens"] > 0
    missing = subprocess.run([str(python), "-c", "import torch"], capture_output=True, text=True, env=env)
    assert missing.returncode == 1 and "No module named 'torch'" in missing.stderr
    assert sys.prefix not in subprocess.run([str(python), "-c", "import sys; print(sys.path)"], capture_output=True,
                                            text=True, env=env).stdout  # the project environment is not on its path
