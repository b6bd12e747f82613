"""Rephrase seed documents with several strategies, judge the results, write Parquet a blend reads.

    rephraser = Rephraser(client, strategies, records, max_seed_chars=1500)
    rephraser.preview(2, work_dir)             # a few records beside their originals, on stderr
    result = rephraser.create(work_dir)        # every (document, strategy), resumable
    judged = judge(judge_client, result.rows, work_dir)
    write_parquet(judged, path)

Every (seed document, strategy) pair is one request, keyed `<seed id>/<strategy>`; answers are
appended to `work_dir/generations-<hash>.jsonl` as they arrive (`client.run_jobs`), so a re-run after
an interruption asks only for what is missing. The hash covers what decides an answer (model,
temperature, max tokens, templates, seed-text cut): change one and the run starts a new file instead
of mixing answers of two settings.

A row of the output: `id` (`<seed id>/<strategy>`), `seed_id`, `strategy`, `text` (training text:
free text trimmed, structured QA formatted), `original` (the seed text as the model saw it), `output`
(the model's raw answer), `model` (the endpoint alias), `prompt_tokens`, `completion_tokens`, and after
`judge` the `judge_*` columns.
Rows are sorted by id: the file's bytes do not depend on the order answers arrived in.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.errors import NemotronError
from nemotron.sdg.client import Client, Job, run_jobs
from nemotron.sdg.judge import JudgeScores, flat_scores, judge_messages
from nemotron.sdg.strategies import Strategy, check_columns, format_output, render

COLUMNS = ["id", "seed_id", "strategy", "text", "output", "model", "prompt_tokens", "completion_tokens"]


@dataclass
class Generated:
    rows: list[dict[str, Any]]  # sorted by id
    failed: dict[str, str]  # key -> why (structured output that stayed invalid)
    requested: int  # requests sent in this run (the rest were resumed from the file)
    empty: int  # answers whose training text was empty (kept out of the rows, counted)


class Rephraser:
    def __init__(self, client: Client, strategies: list[Strategy], records: list[dict[str, Any]], *,
                 max_seed_chars: int | None = 1500, max_field_chars: int | None = None,
                 max_list_items: int | None = None, where: str = "the seed data"):
        check_columns(strategies, records, where)  # before any request
        self.client, self.strategies, self.records, self.max_seed_chars = client, strategies, records, max_seed_chars
        self.max_field_chars, self.max_list_items = max_field_chars, max_list_items

    def jobs(self, records: list[dict[str, Any]] | None = None) -> list[Job]:
        return [Job(key=f"{record['id']}/{strategy.name}", messages=render(strategy, record, self.max_seed_chars),
                    schema=strategy.schema, max_field_chars=self.max_field_chars,
                    max_list_items=self.max_list_items, meta={"seed_id": record["id"], "strategy": strategy.name})
                for record in (self.records if records is None else records) for strategy in self.strategies]

    def run_hash(self) -> str:
        e = self.client.endpoint
        decides = {"model": e.model, "temperature": e.temperature, "max_tokens": e.max_tokens,
                   "max_field_chars": self.max_field_chars, "max_list_items": self.max_list_items,
                   "invalid_retries": e.invalid_retries, "max_seed_chars": self.max_seed_chars,
                   "strategies": [[s.name, s.system, s.template, s.schema.__name__ if s.schema else None]
                                  for s in self.strategies]}
        return hashlib.sha256(json.dumps(decides, sort_keys=True).encode()).hexdigest()[:16]

    def preview(self, n: int, work_dir: Path) -> None:
        """Generate the first `n` seed documents with every strategy; print them beside the originals.

        The answers go into the run's file, so `create()` does not ask for them again.
        """
        if n < 1:
            return
        run = run_jobs(self.client, self.jobs(self.records[:n]), self.run_file(work_dir), desc="preview")
        by_name = {s.name: s for s in self.strategies}
        originals = {r["id"]: r["text"] for r in self.records}
        for job in self.jobs(self.records[:n]):
            record = run.records.get(job.key)
            shown = (f"[failed: {run.failed.get(job.key)}]" if record is None else
                     format_output(by_name[record["strategy"]], record["text"], record["parsed"]))
            print(side_by_side(job.key, originals[job.meta["seed_id"]][: self.max_seed_chars], shown), file=sys.stderr)

    def run_file(self, work_dir: Path) -> Path:
        """work_dir/generations-<hash>.jsonl; files of other settings are removed (said on stderr)."""
        path = work_dir / f"generations-{self.run_hash()}.jsonl"
        for stale in work_dir.glob("generations-*.jsonl"):
            if stale != path:
                print(f"sdg: settings changed; {stale.name} belongs to another run and is removed", file=sys.stderr)
                stale.unlink()
        return path

    def create(self, work_dir: Path) -> Generated:
        """Every (document, strategy) answer, resumed from `work_dir` when some are already there."""
        run = run_jobs(self.client, self.jobs(), self.run_file(work_dir), desc="rephrase")
        by_name = {s.name: s for s in self.strategies}
        originals = {r["id"]: r["text"][: self.max_seed_chars] for r in self.records}
        rows, empty = [], 0
        for key, record in sorted(run.records.items()):
            text = format_output(by_name[record["strategy"]], record["text"], record["parsed"])
            if not text:
                empty += 1
                continue
            rows.append({"id": key, "seed_id": record["seed_id"], "strategy": record["strategy"], "text": text,
                         "original": originals[record["seed_id"]], "output": record["text"],
                         "model": self.client.endpoint.alias,
                         "prompt_tokens": record["prompt_tokens"], "completion_tokens": record["completion_tokens"]})
        return Generated(rows, run.failed, run.requested, empty)


def side_by_side(title: str, left: str, right: str, width: int = 60, max_lines: int = 12) -> str:
    """Two texts in columns, the original on the left."""
    import textwrap

    def wrap(text: str) -> list[str]:
        lines = [piece for line in text.splitlines() for piece in (textwrap.wrap(line, width) or [""])]
        return lines[:max_lines] + (["..."] if len(lines) > max_lines else [])

    a, b = wrap(left), wrap(right)
    rows = [f"{x:<{width}} | {y}" for x, y in zip(a + [""] * (len(b) - len(a)), b + [""] * (len(a) - len(b)))]
    rule = "-" * (2 * width + 3)
    return "\n".join([rule, f"{title}: {'original':<{width - len(title) - 2}} | rephrased", rule, *rows])


def judge(client: Client, rows: list[dict[str, Any]], work_dir: Path, *,
          max_chars: int | None = 1500, max_tokens: int = 160,
          max_field_chars: int | None = None) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, int]]:
    """Rows with `judge_*` columns (None where the judge's answer stayed invalid), the failures, and
    the judge's own prompt and completion tokens (they belong on the bill too)."""
    jobs = [Job(key=row["id"], messages=judge_messages(row["original"], row["text"], max_chars),
                schema=JudgeScores, max_tokens=max_tokens, max_field_chars=max_field_chars) for row in rows]
    e = client.endpoint
    decides = json.dumps({"model": e.model, "temperature": e.temperature, "max_tokens": max_tokens,
                          "max_field_chars": max_field_chars,
                          "max_chars": max_chars, "texts": {row["id"]: row["text"] for row in rows}}, sort_keys=True)
    path = work_dir / f"judgments-{hashlib.sha256(decides.encode()).hexdigest()[:16]}.jsonl"
    for stale in work_dir.glob("judgments-*.jsonl"):
        if stale != path:
            stale.unlink()
    run = run_jobs(client, jobs, path, desc="judge")
    judged = [{**row, **flat_scores((run.records.get(row["id"]) or {}).get("parsed"))} for row in rows]
    tokens = {key: sum(record[key] for record in run.records.values())
              for key in ("prompt_tokens", "completion_tokens")}
    return judged, run.failed, tokens


def tokens_by_strategy(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        entry = totals.setdefault(row["strategy"], {"prompt_tokens": 0, "completion_tokens": 0})
        entry["prompt_tokens"] += row["prompt_tokens"]
        entry["completion_tokens"] += row["completion_tokens"]
    return totals


def write_parquet(rows: list[dict[str, Any]], path: Path) -> Path:
    """The rows as one Parquet file, atomically (a blend source: text column `text`, ids in `id`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise NemotronError(f"no rephrased records to write to {path}: every request failed or was empty")
    table = pa.Table.from_pylist(rows)
    with atomic.output_path(path) as tmp:
        pq.write_table(table, tmp)
    return path
