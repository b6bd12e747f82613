"""The reproducibility check (`make repro`, run by CI): a short fixed pipeline, digest for digest.

    python scripts/repro.py              # run it into a temp folder, compare with the golden file; exit 1 on a move
    python scripts/repro.py --update     # run it and rewrite the golden file (commit it, and say why)
    python scripts/repro.py --keep runs/repro-before      # also keep the run folder (to diff against later)
    python scripts/repro.py --against runs/repro-before   # on a move, diff the first step that moved
                                                          # against that kept run

The pipeline is nano2's stage 0 at tiny scale with a few dozen training steps (`PIPELINE`): data
curation, training, evaluation, three artifacts. It runs on one core with one torch thread (CPU
affinity, `--*.num-threads 1`, OMP_NUM_THREADS=1), because the last bits of a float sum depend on how
it is split between threads. On one thread the bytes are the same on machines of one kind with the same
torch, but not on every CPU: an AMD EPYC (AVX2 kernels) trained other bytes than the machine that wrote
the golden file, with the golden file's own commit (2026-12-03). So where the digests differ from the
golden file's, the check runs the pipeline once more as the commit that wrote the golden file ran it, on
this machine: if that makes this run's digests, the machine moved them, not the code, and the check
passes, saying so. The golden file names the machine that wrote it (`machine`).

The golden file (`tests/golden/repro_digests.json`) holds, per step, the artifact's digest and what it
covers, read back from the artifact: its config as the digest sees it, its typed fields, its inputs'
digests and each of its files' sha256. On a mismatch the script names every step that moved and, for
the first one in pipeline order, shows what differs:
- where `python -m nemotron.artifact diff` exists, its output for that step against the same pipeline
  run as the commit that last wrote the golden file ran it (a temporary git worktree of that commit, the
  run above), or against the run kept in `--against DIR`;
- otherwise (or without git history) what differs from the golden record: settings old -> new, typed
  fields, files, inputs.
A change that moves a digest updates the golden file in the same commit and says why in its message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemotron.artifact.digest import files_under, relative_name, sha256_file
from nemotron.artifact.lineage import load_any
from nemotron.artifact.locations import location_fields
from nemotron.artifact.uptodate import changed_settings, identity

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "repro_digests.json"
STEPS = ["data_curation", "training", "evaluation"]  # pipeline order, folders under the stage's output
PIPELINE = ["-m", "nemotron.recipes.nano2.stage0_pretrain", "--scale", "tiny", "--seed", "0",
            "--training.steps", "40", "--training.num-threads", "1", "--evaluation.num-threads", "1"]
BASE_FIELDS = {"schema_version", "type", "path", "created_at", "producer", "config", "inputs", "metrics", "scale",
               "seed", "digest"}  # the typed fields are the others


def machine_kind() -> str:
    """The CPU and the kernels torch picks on it, e.g. "AMD EPYC, AVX2": what the bytes of a float step depend on."""
    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")
    return f"{model}, {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}"


def one_core() -> None:
    """In the child before exec: one CPU, so every thread count the steps derive from the cores is one."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def run_pipeline(out: Path, src: Path | None = None) -> subprocess.CompletedProcess:
    """Run `PIPELINE` into `out` on one core; `src`: run that source tree's nemotron instead of ours."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
    env.pop("NEMOTRON_TRACKER", None)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, *PIPELINE, "--output-dir", str(out)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, preexec_fn=one_core, check=False)


def reference_run(golden: Path, into: Path) -> Path | None:
    """The pipeline as the commit that last wrote the golden file runs it (a git worktree of that commit,
    run into `into`): to tell a machine's rounding from a change of code, and for `nemotron.artifact diff`;
    None where that cannot be made (no git history)."""
    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=False)

    commit = git("log", "-1", "--format=%H", "--", str(golden)).stdout.strip()
    tree = into / "source"
    if not commit or git("worktree", "add", "--detach", str(tree), commit).returncode != 0:
        return None
    try:
        print(f"repro: running the pipeline as {commit[:12]} (the golden file's commit) ran it, on this machine",
              file=sys.stderr)
        made = run_pipeline(into / "stage0_pretrain", src=tree / "src")
    finally:
        git("worktree", "remove", "--force", str(tree))
    return into / "stage0_pretrain" if made.returncode == 0 else None


def record(folder: Path) -> dict:
    """What the digest of the artifact in `folder` covers, as the golden file keeps it."""
    art = load_any(folder)
    data = json.loads(art.model_dump_json())
    locations = set(location_fields(type(art).model_fields))
    return {
        "type": art.type,
        "digest": art.digest,
        "config": identity(art.config),
        "fields": {k: v for k, v in data.items() if k not in BASE_FIELDS and k not in locations},
        "inputs": sorted([ref.type, ref.digest] for ref in art.inputs),
        "files": {relative_name(f, art.path): sha256_file(f) for ref in art.files() for f in files_under(Path(ref))},
    }


def differences(old: dict, new: dict) -> list[str]:
    """The short comparison of one step's golden record with this run's, one line per difference."""
    lines = [f"type {old['type']} -> {new['type']}"] if old["type"] != new["type"] else []
    lines += [f"setting {change}" for change in changed_settings(old["config"], new["config"])]
    lines += [f"field {change}" for change in changed_settings(old["fields"], new["fields"])]
    for name in sorted(set(old["files"]) | set(new["files"])):
        before, after = old["files"].get(name), new["files"].get(name)
        if before != after:
            lines.append(f"file {name}: {(before or 'absent')[:12]} -> {(after or 'absent')[:12]}")
    if old["inputs"] != new["inputs"]:
        lines.append(f"inputs {[f'{t} {d[:12]}' for t, d in old['inputs']]} -> "
                     f"{[f'{t} {d[:12]}' for t, d in new['inputs']]} (an upstream step moved)")
    return lines or ["the same content: the digest's own definition changed (a new nemotron.artifact.digest?)"]


def has_diff_command() -> bool:
    """Whether `python -m nemotron.artifact` offers `diff` (its usage line lists the subcommands)."""
    done = subprocess.run([sys.executable, "-m", "nemotron.artifact", "--help"], capture_output=True, text=True,
                          check=False)
    choices = re.search(r"\{([^}]*)\}", done.stdout.split("\n", 1)[0])  # usage: ... {show,lineage,verify}
    return choices is not None and "diff" in choices.group(1).split(",")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the golden file from this run")
    parser.add_argument("--golden", type=Path, default=GOLDEN, help="the golden file (default: %(default)s)")
    parser.add_argument("--keep", type=Path, help="run into this folder (kept) instead of a temp folder")
    parser.add_argument("--against", type=Path, help="a kept run to `nemotron.artifact diff` the first moved step with")
    args = parser.parse_args()

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="nemotron-repro-") as temp:
        out = (args.keep or Path(temp) / "stage0_pretrain").resolve()
        done = run_pipeline(out)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-4000:])
            print(f"error: the repro pipeline failed (exit {done.returncode}): python {' '.join(PIPELINE)}",
                  file=sys.stderr)
            return 2
        now = {f"stage0_pretrain/{step}": record(out / step) for step in STEPS}
        seconds = time.perf_counter() - started

        if args.update:
            args.golden.parent.mkdir(parents=True, exist_ok=True)
            document = {"pipeline": f"python {' '.join(PIPELINE)} --output-dir OUT  (one core, one torch thread)",
                        "machine": machine_kind(), "steps": now}
            args.golden.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
            print(f"repro: wrote {args.golden} ({len(now)} steps, {seconds:.0f} s); commit it and say in the "
                  "message why the digests moved", file=sys.stderr)
            return 0

        if not args.golden.exists():
            print(f"error: no golden file {args.golden}; make one with python scripts/repro.py --update",
                  file=sys.stderr)
            return 2
        document = json.loads(args.golden.read_text())
        golden = document["steps"]
        moved = [step for step in now if golden.get(step, {}).get("digest") != now[step]["digest"]]
        for step, rec in now.items():
            before = golden.get(step, {}).get("digest") or "absent"
            mark = "moved" if step in moved else "same "
            print(f"repro: {mark} {step:32s} {rec['type']:20s} {before[:12]} -> {rec['digest'][:12]}",
                  file=sys.stderr)
        if not moved:
            print(f"repro: all {len(now)} digests match {args.golden} ({seconds:.0f} s)", file=sys.stderr)
            return 0

        # Another kind of machine can round the float steps differently: the golden file's commit, run here.
        reference = reference_run(args.golden, Path(temp) / "reference")
        if reference is not None and all(load_any(reference / step.split("/")[-1]).digest == rec["digest"]
                                         for step, rec in now.items()):
            print(f"repro: the golden file's commit makes these same digests on this machine ({machine_kind()}; "
                  f"the golden file's: {document.get('machine', 'not recorded')}): the machine moved them, not "
                  f"the code ({seconds:.0f} s)", file=sys.stderr)
            return 0
        first = moved[0]
        print(f"repro: first step that moved: {first}", file=sys.stderr)
        name = first.split("/")[-1]
        diff_here = has_diff_command()
        against = args.against or reference
        if diff_here and against is not None:
            diff = subprocess.run([sys.executable, "-m", "nemotron.artifact", "diff", str(against / name),
                                   str(out / name)], capture_output=True, text=True, check=False)
            sys.stderr.write(diff.stdout + diff.stderr)
        elif first in golden:
            for line in differences(golden[first], now[first]):
                print(f"  {line}", file=sys.stderr)
        else:
            print(f"  not in the golden file: {first}", file=sys.stderr)
        print("repro: digests moved. If the change is meant to move them, run python scripts/repro.py --update "
              "and commit the golden file with the change, saying why", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
