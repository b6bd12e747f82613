"""The normalized post-training schema: Arrow types, Parquet reading and writing, the dataset card.

Every normalized record has exactly these columns (`SCHEMA`), in this order; `COLUMN_DOCS` says what
each means and is what the generated dataset card prints. Parquet files are written with a fixed
schema, no pandas metadata and a fixed row-group size, so equal records give byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from nemotron import atomic
from nemotron.errors import NemotronError

MESSAGE = pa.struct([(name, pa.string()) for name in
                     ("role", "content", "name", "channel", "recipient", "content_type")])
SCHEMA = pa.schema([
    ("id", pa.string()),
    ("text", pa.string()),
    ("messages", pa.list_(MESSAGE)),
    ("dataset", pa.string()),
    ("split", pa.string()),
    ("source_id", pa.string()),
    ("completion_start", pa.int64()),
    ("meta_correctness", pa.float64()),
    ("meta_correctness_source", pa.string()),
    ("meta_difficulty_bin", pa.string()),
    ("meta_difficulty_source", pa.string()),
    ("meta_pass_rate", pa.float64()),
    ("meta_domain", pa.string()),
    ("meta_tool_use", pa.struct([("names", pa.list_(pa.string())), ("calls", pa.int64())])),
    ("meta_reasoning", pa.struct([("present", pa.bool_()), ("chars", pa.int64())])),
    ("meta_num_turns", pa.int64()),
    ("quality_valid_harmony", pa.bool_()),
    ("quality_completion_nonempty", pa.bool_()),
    ("quality_tool_args_json", pa.bool_()),
    ("quality_tools_declared", pa.bool_()),
    ("quality_has_final_answer", pa.bool_()),
    ("loss_mode", pa.string()),
])
COLUMN_DOCS = {
    "id": "sha1 of `text`: equal conversations have equal ids (exact dedup key)",
    "text": "the whole conversation rendered in Harmony for training (a final answer ends with <|return|>)",
    "messages": "the structured form: Harmony messages {role, content, name, channel, recipient, content_type}",
    "dataset": "the dataset (tag) the record came from, e.g. math, agentic",
    "split": "the source split, e.g. medium, tool_calling, MCQ",
    "source_id": "the source record's uuid (or file:line when it has none)",
    "completion_start": ("character offset in `text` where the completion (first assistant message after the last "
                         "user turn) starts"),
    "meta_correctness": "0..1 from the family's correctness signal; null when the family has none",
    "meta_correctness_source": ("answer_match, pass_rate, lean_verified, boxed_answer_format, judge_filtered, "
                                "verifier_filtered, given, none"),
    "meta_difficulty_bin": "low / medium / high (rule in nemotron.data_prep.post_training.records)",
    "meta_difficulty_source": "pass_rate (math metadata) or completion_chars (length proxy)",
    "meta_pass_rate": "mean accuracy over the Math-v2 reason_* regimes, null elsewhere",
    "meta_domain": "math, math_proofs, science, tool_use, chat, ...",
    "meta_tool_use": "{names: distinct tools called, calls: number of calls}",
    "meta_reasoning": "{present: has analysis messages, chars: their total length}",
    "meta_num_turns": "number of user turns",
    "quality_valid_harmony": "the text parses back into exactly `messages`",
    "quality_completion_nonempty": "the last assistant message has text",
    "quality_tool_args_json": "every tool call's arguments are JSON",
    "quality_tools_declared": "every called tool is declared in the record's `tools`",
    "quality_has_final_answer": "the conversation ends with a final-channel answer (not a tool call)",
    "loss_mode": "assistant_all (every assistant message is a target) or final_only (only the last turn)",
}
ROW_GROUP_SIZE = 1024


def write_records(records: list[dict[str, Any]], path: Path, schema: pa.Schema = SCHEMA) -> Path:
    """Write records as Parquet, atomically (temp name in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(records, schema=schema)
    with atomic.output_path(path) as temp:
        pq.write_table(table, temp, row_group_size=ROW_GROUP_SIZE, compression="zstd", store_schema=False)
    return path


def read_records(paths: list[Path] | Path) -> list[dict[str, Any]]:
    """Records of one or several Parquet files, in order."""
    records = []
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        try:
            records.extend(pq.read_table(path).to_pylist())
        except (OSError, pa.ArrowInvalid) as error:
            raise NemotronError(
                f"{path}: not a readable Parquet file ({error}); re-run the step that wrote it") from None
    return records


def split_files(dataset_dir: Path) -> dict[str, list[Path]]:
    """{split: its Parquet files} of a Hugging Face layout folder `<tag>/data/<split>/*.parquet`."""
    data = Path(dataset_dir) / "data"
    return {folder.name: sorted(folder.glob("*.parquet")) for folder in sorted(data.iterdir()) if folder.is_dir()} \
        if data.is_dir() else {}


def dataset_card(tag: str, counts: dict[str, int], removed: dict[str, int], sources: list[str],
                 splits: list[str]) -> str:
    """The README.md of one normalized dataset: YAML header for the Hub, schema, counts, removals."""
    configs = "".join(f"  - split: {split}\n    path: data/{split}/*.parquet\n" for split in sorted(splits))
    lines = [
        "---", "configs:", "- config_name: default", "  data_files:", configs.rstrip("\n"), "---", "",
        f"# {tag}", "",
        "Post-training conversations normalized into one text-first schema and rendered in the Harmony",
        "format by `nemotron.recipes.post_training_data.normalize`.", "",
        "## Counts", "", "| split | records |", "|---|---|",
        *[f"| {split} | {counts[split]} |" for split in sorted(counts)],
        f"| **total** | {sum(counts.values())} |", "",
        "## Removed, by reason", "", "| reason | records |", "|---|---|",
        *([f"| {reason} | {n} |" for reason, n in sorted(removed.items())] or ["| (none) | 0 |"]), "",
        "## Sources", "", *[f"- `{source}`" for source in sources], "",
        "## Schema", "", "| column | type | meaning |", "|---|---|---|",
        *[f"| `{field.name}` | `{field.type}` | {COLUMN_DOCS[field.name]} |" for field in SCHEMA], "",
    ]
    return "\n".join(lines)
