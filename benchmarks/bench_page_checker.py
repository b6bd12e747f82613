"""Prove the page checker: re-introduce contradictions issue #58 found, one at a time, and show each fails.

`scripts/page_figures.py` checks that the figures a learner reads agree with the code and the generated
result blocks. A checker that passes proves nothing until it is seen to fail: this copies the checkout's
tracked pages to a temporary folder, and for each contradiction below (the text as it stood at 6639e60, or
the code change that made the text false) applies it alone, runs `check()` on the copy and expects a
problem naming the file it changed; then restores the file. It prints one row per contradiction and
exits 1 if the checker missed any (or if the untouched copy already fails).

    python benchmarks/bench_page_checker.py          # ~1 minute on 2 cores
    python benchmarks/bench_page_checker.py --quick  # the first three contradictions only (CI's bench-check)
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("page_figures", REPO / "scripts" / "page_figures.py")
page_figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(page_figures)

N2, N3 = "src/nemotron/recipes/nano2", "src/nemotron/recipes/nano3"
# (what the issue says, file, text now, the contradiction re-introduced)
CONTRADICTIONS = [
    ("nano2 stage 0 --steps help 'tiny 200' (STEPS: 150)", f"{N2}/stage0_pretrain/training.py",
     '    steps: per_scale("Optimizer steps", STEPS) = None\n',
     '    steps: int | None = None\n    """Optimizer steps; default per scale (tiny 200)."""\n'),
    ("nano3 stage 0 --steps help typed, another figure", f"{N3}/stage0_pretrain/training.py",
     '    steps: per_scale("Optimizer steps (x DENSE_STEPS_PER_MOE_STEP with --dense, x MOE_STEP_TIME_RATIO with "\n'
     '                     "--dense --equal-time)", STEPS) = None\n',
     '    steps: int | None = None\n    """Optimizer steps; default per scale (tiny 200)."""\n'),
    ("a help's per-scale count typed against apply_scale(FULL_PROBLEMS)", f"{N3}/stage2_rl/evaluation.py",
     '"""Held-out problems to score; default per scale (tiny 200).',
     '"""Held-out problems to score; default per scale (tiny 20).'),
    ("nano2 SFT '3 passes = ~280 steps' (3.6 passes, 334 steps)", f"{N2}/stage1_sft/training.py",
     "Tiny: ~370 rows of chatterbot and skill chats, steps of 4 rows;",
     "Tiny: ~370 rows of chatterbot and skill chats, 3 passes = ~280\n# steps of 4 rows;"),
    ("training/settings.py: 'tiny's 340-step curve' (150)", "src/nemotron/training/settings.py",
     '"""Validation loss every this many steps (and at the last)."""',
     '"""Validation loss every this many steps (and at the last): 8 points on nano2 tiny\'s 340-step curve."""'),
    ("nano2 hardware row 'stage 0 in about 30 s' (the run: 20.4 s)", f"{N2}/README.md",
     "any laptop CPU: the whole recipe", "any laptop CPU: stage 0 in about 30 s on 2 idle cores, the whole recipe"),
    ("nano3 README: the dense model gets '1.5x the MoE steps' (1.0)", f"{N3}/README.md",
     "`DENSE_STEPS_PER_MOE_STEP` = 1x", "`DENSE_STEPS_PER_MOE_STEP` = 1.5x"),
    ("docs/performance.md: MoE and dense 'measured them equal' (28.7 s vs 19.5 s)", "docs/performance.md",
     "the nano3 README's Expected results gives the three runs' seconds",
     "idle, the nano3 README's recipe run (Expected results, 2026-11-27) measured them equal;"),
    ("nano3 stage 0: '~0.35 s per MoE step' (the run: 0.18 s)", f"{N3}/stage0_pretrain/training.py",
     "# Optimizer steps and window length per scale.",
     "# Optimizer steps and window length per scale. Tiny: ~0.35 s per MoE step."),
    ("nano2 README: the NLL alone 'hardly moves the near miss' (0.172 -> 0.117)", f"{N2}/README.md",
     'sampling"), does as well as the default here:', 'sampling"), hardly moves the near miss:'),
    ("'Why hybrid?' measured without the recipe's scan", "benchmarks/bench_hybrid_vs_transformer.py",
     "lambda v: use_training_scan(build_model(build_config(\"tiny\", v), seed=0))",
     "lambda v: build_model(build_config(\"tiny\", v), seed=0)"),
    ("nano2 README: 20 benchmark items at tiny (10)", f"{N2}/README.md",
     "10 items per task at tiny", "20 items per task at tiny"),
    ("nano3 README: 20 benchmark items at tiny (10)", f"{N3}/README.md",
     "10 items per task at tiny", "20 items per task at tiny"),
    ("docs/benchmarks.md: 20 items at tiny, small 200", "docs/benchmarks.md",
     "with 10 items at tiny, 100 at small", "with 20 items at tiny, 200 at small"),
    ("nano2 __main__ docstring: 20 items per task at tiny", f"{N2}/__main__.py",
     "10 items per task at tiny", "20 items per task at tiny"),
    ("nano3 __main__ docstring: 20 items per task at tiny", f"{N3}/__main__.py",
     "10 items per task at tiny", "20 items per task at tiny"),
    ("the card: 'a tiny model has seen a few thousand tokens of chat' (nano3: none)",
     "src/nemotron/recipes/report_card.py", '"page; docs/run-a-recipe.md shows the API."',
     '"page; docs/run-a-recipe.md shows the API. A tiny model has seen a few thousand tokens of chat."'),
    ("nano3 card header lacks the version and commit", f"{N3}/report.py",
     '    md = header("nano3", artifacts)', '    md = ["# nano3 report card", ""]'),
    ("sdg README: the MoE row with 3.2 B active (cost.py: 3.0 B)", "src/nemotron/sdg/README.md",
     "rounds them: 30B weights, 3B active", "rounds them: 31.6B weights, 3.2B active"),
    ("evaluation/benchmarks.py: the docstring example's old signature", "src/nemotron/evaluation/benchmarks.py",
     'evaluate_benchmarks(lm, ["core"], out, limit=100)',
     'evaluate_benchmarks(model, tokenizer, ["core"], out, limit=100)'),
    ("nano2 stage 0: 'a GPU keeps transformers' forward' (only with mamba_ssm)", f"{N2}/stage0_pretrain/training.py",
     "a GPU with mamba_ssm installed keeps\n    # transformers' forward", "a GPU keeps transformers' forward\n    #"),
    ("training/run.py: record() anneals the schedule when --patience fires", "src/nemotron/training/run.py",
     "        state.ema = EMA_DECAY * state.ema + (1 - EMA_DECAY) * loss\n",
     "        state.ema = EMA_DECAY * state.ema + (1 - EMA_DECAY) * loss\n"
     "        self._parts[2].lr_lambdas[0].anneal(step, self.steps)\n"),
]


def main(quick: bool = False) -> int:
    contradictions = CONTRADICTIONS[:3] if quick else CONTRADICTIONS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files = subprocess.run(["git", "ls-files", "README.md", "docs", "src", "benchmarks", "scripts", "examples"],
                               cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
        for name in files:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, root / name)
        clean = page_figures.check(root)
        if clean:
            print("the checkout itself fails the check:\n" + "\n".join(clean), file=sys.stderr)
            return 1
        missed = 0
        print("| contradiction re-introduced | file | the checker says |\n|---|---|---|")
        for what, name, now, then in contradictions:
            path = root / name
            text = path.read_text(encoding="utf-8")
            if text.count(now) != 1:
                raise SystemExit(f"error: {name} no longer holds {now!r} once; update CONTRADICTIONS")
            path.write_text(text.replace(now, then), encoding="utf-8")
            try:
                found = [p for p in page_figures.check(root) if name in p or Path(name).name in p]
            finally:
                path.write_text(text, encoding="utf-8")
            missed += not found
            print(f"| {what} | `{name}` | {found[0] if found else 'MISSED'} |")
        print(f"\n{len(contradictions) - missed} of {len(contradictions)} contradictions caught")
        return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(quick="--quick" in sys.argv[1:]))
