"""A run browser: one self-contained HTML page of every artifact under a folder.

    write_page(runs, out)   python -m nemotron.artifact browse RUNS -o runs.html

The page (the template `browse.html` beside this module, with the data embedded as JSON; no server, no
network, opened from disk) draws the lineage graph, one node per artifact folder under RUNS and one
edge per recorded input, in layers: an artifact one layer below the deepest of its inputs. Selecting a
node shows its type, digest, producer, config, typed fields, metrics, the curves of its metrics log
(`metrics_path`, or a metrics.jsonl in its folder: what training steps write), what its training did
(`watch_path`, or a watch.jsonl in its folder, as `nemotron.training.watch` writes it: a step slider over
GRPO's groups with each sample's tokens shaded by log-probability, DPO's probe pairs' log-ratios and how
many flipped, the per-token loss of held-out texts at each validation) and the report card of
its run (`report/report.md` in its folder or a folder above it, up to RUNS). Selecting two (tick
"compare", or shift-click) shows `python -m nemotron.artifact diff` of the two, computed here for every
pair by `nemotron.artifact.diff`. `runs.html#<node>` opens with a node selected, `#<node>|<node>` with
a diff. The same folder gives the same bytes: everything is sorted and nothing of the moment (time, host) is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.artifact.diff import BASE_KEYS, Catalog, artifacts_under, diff_paths, render
from nemotron.errors import NemotronError

TEMPLATE = Path(__file__).with_name("browse.html")
DATA_MARK = "/*DATA*/"
MAX_POINTS = 400  # per curve: a long run's log is thinned to this many points (every k-th, and the last)


def page_data(runs: Path) -> dict[str, Any]:
    """Everything the page shows, as one JSON-ready dict (see the module docstring)."""
    runs = runs.resolve()
    folders = {name: path.resolve() for name, path in artifacts_under(runs).items()}
    if not folders:
        raise NemotronError(f"{runs} holds no artifact folder (no metadata.json below it); pass a run's output folder")
    catalog = Catalog()
    by_path = {path: name for name, path in folders.items()}
    nodes, reports = [], {}
    for name, path in folders.items():
        data = catalog.get(path).data
        inputs = [{**ref, "node": by_path.get(Path(ref.get("path", "")).resolve())} for ref in data.get("inputs") or []]
        report = report_card(path, runs)
        if report is not None:
            reports.setdefault(str(report.relative_to(runs)), report.read_text(encoding="utf-8"))
        nodes.append({
            "id": name, "type": data.get("type"), "digest": data.get("digest"), "path": str(path),
            "created_at": data.get("created_at"), "producer": data.get("producer") or {},
            "config": data.get("config") or {}, "metrics": data.get("metrics") or {},
            "fields": {k: v for k, v in data.items() if k not in BASE_KEYS},
            "files": catalog.get(path).files, "inputs": inputs,
            "curves": curves(metrics_log(path, data)),
            "watch": watch_records(path, data),
            "report": str(report.relative_to(runs)) if report is not None else None,
        })
    place(nodes)
    diffs = {}
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            diffs[f"{a['id']}|{b['id']}"] = "\n".join(render(diff_paths(a["path"], b["path"], catalog)))
    return {"root": str(runs), "nodes": nodes, "reports": reports, "diffs": diffs}


def place(nodes: list[dict[str, Any]]) -> None:
    """In place: each node's `layer` (one below the deepest input) and `row` within its layer, ordered
    by the mean row of its inputs (fewer crossing edges), then by name."""
    by_id = {n["id"]: n for n in nodes}

    def layer(node: dict, stack: tuple[str, ...] = ()) -> int:
        if "layer" not in node:
            ups = [by_id[i["node"]] for i in node["inputs"] if i["node"] in by_id and i["node"] not in stack]
            node["layer"] = 1 + max((layer(u, (*stack, node["id"])) for u in ups), default=-1)
        return node["layer"]

    for node in nodes:
        layer(node)
    for depth in range(max(n["layer"] for n in nodes) + 1):
        def key(node: dict) -> tuple[float, str]:
            rows = [by_id[i["node"]]["row"] for i in node["inputs"] if i["node"] in by_id and "row" in by_id[i["node"]]]
            return (sum(rows) / len(rows) if rows else 0.0, node["id"])

        for row, node in enumerate(sorted((n for n in nodes if n["layer"] == depth), key=key)):
            node["row"] = row


def metrics_log(folder: Path, data: dict[str, Any]) -> Path | None:
    """The JSONL metrics log of an artifact: its `metrics_path` field, else metrics.jsonl in its folder."""
    for candidate in (data.get("metrics_path"), folder / "metrics.jsonl"):
        if candidate and Path(candidate).is_file() and Path(candidate).suffix == ".jsonl":
            return Path(candidate)
    return None


def curves(log: Path | None) -> dict[str, list[list[float]]]:
    """Each numeric series of a metrics log as [[step, value], ...], thinned to at most MAX_POINTS."""
    if log is None:
        return {}
    series: dict[str, list[list[float]]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a killed run: the rest of the log still draws
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            continue
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
                series.setdefault(key, []).append([record["step"], value])
    thinned = {}
    for key, points in sorted(series.items()):
        stride = -(-len(points) // MAX_POINTS)
        thinned[key] = points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])
    return thinned


def watch_records(folder: Path, data: dict[str, Any]) -> list[dict[str, Any]]:
    """What a training step kept of what it did (`nemotron.training.watch`): the records of its `watch_path`
    field, else of a watch.jsonl in its folder; none for other artifacts. A line cut short is left out."""
    records = []
    for candidate in (data.get("watch_path"), folder / "watch.jsonl"):
        if candidate and Path(candidate).is_file():
            for line in Path(candidate).read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a killed run
                if isinstance(record, dict) and isinstance(record.get("step"), int) and "kind" in record:
                    records.append(record)
            break
    return records


def report_card(folder: Path, runs: Path) -> Path | None:
    """The nearest `report/report.md` at or above `folder`, up to `runs`: the report card of its run."""
    for parent in (folder, *folder.parents):
        if (parent / "report" / "report.md").is_file():
            return parent / "report" / "report.md"
        if parent == runs or runs not in parent.parents:
            return None
    return None


def write_page(runs: str | Path, out: str | Path) -> Path:
    """Write the page for every artifact under `runs` to `out` (atomically); returns `out`."""
    runs, out = Path(runs), Path(out)
    if not runs.is_dir():
        raise NemotronError(f"{runs} is not a folder; pass the output folder of a run (or a folder of runs)")
    data = json.dumps(page_data(runs), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    # Inside <script>, "</script>" or "<!--" in a config value would end the block: no "<" at all.
    html = TEMPLATE.read_text(encoding="utf-8").replace(DATA_MARK, data.replace("<", "\\u003c"))
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic.write_text(out, html, fsync=False)
