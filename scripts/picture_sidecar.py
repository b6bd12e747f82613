"""What a picture of a run was made from: a JSON sidecar beside the PNG (`docs/chat-page.png.json`).

The pictures in the READMEs (the chat page, the run browser) are made by scripts from a recipe run. Each script
writes, beside its picture, the command that made it and the digest of every artifact the picture shows, by step
(`stage1_sft/training`: the artifact's `digest`). `tests/test_readme_results.py` compares those digests with the
ones the Expected-results block of the recipe's README records (`scripts/readme_results.py`): a picture made from
another run than the one whose numbers the README shows fails there.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path


def step_name(folder: str | Path) -> str:
    """A step's name in a run, its stage and step folders (`runs/nano2/stage1_sft/training`: `stage1_sft/training`)."""
    return "/".join(Path(folder).resolve().parts[-2:])


def digests(folders: list[str | Path]) -> dict[str, str]:
    """{step: digest} of the artifact folders given (each a `<stage>/<step>` folder with its metadata.json)."""
    found = {}
    for folder in folders:
        metadata = Path(folder) / "metadata.json"
        if not metadata.is_file():
            raise SystemExit(f"error: {folder} holds no artifact (no metadata.json); pass a recipe run's folder")
        found[step_name(folder)] = json.loads(metadata.read_text(encoding="utf-8"))["digest"]
    return found


def run_steps(run: Path) -> list[Path]:
    """Every artifact folder of a recipe run (`<run>/<stage>/<step>/metadata.json`), in name order."""
    return sorted(path.parent for path in Path(run).glob("*/*/metadata.json"))


def write_sidecar(picture: str | Path, folders: list[str | Path], **extra) -> Path:
    """Write `<picture>.json`: the command that made the picture, the run's commit and seed (of the first
    folder), the digests of `folders` by step, and `extra`."""
    first = json.loads((Path(folders[0]) / "metadata.json").read_text(encoding="utf-8"))
    sidecar = Path(f"{picture}.json")
    record = {"picture": Path(picture).name, "command": "python " + shlex.join(sys.argv),
              "commit": first["producer"]["git_commit"][:12], "seed": first["seed"], "digests": digests(folders),
              **extra}
    sidecar.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return sidecar
