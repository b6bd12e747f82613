"""JSONL (SFT / RL records): each line goes through one named transform and is written canonically.

The transforms (`transforms.py`: passthrough, openai_chat, sharegpt, sharegpt_to_messages, sft,
rl_record) are named, since the name goes into the run hash and must say what it does. Malformed lines
and records a transform skips are counted, never dropped silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.data_prep.formats.base import ShardFormat, ShardInput
from nemotron.data_prep.transforms import (
    canonical_json,
    openai_chat,
    parse_line,
    passthrough,
    rl_record,
    sft,
    sharegpt,
    sharegpt_to_messages,
)
from nemotron.errors import NemotronError

TRANSFORMS = {"passthrough": passthrough, "openai_chat": openai_chat, "sharegpt": sharegpt,
              "sharegpt_to_messages": sharegpt_to_messages, "sft": sft, "rl_record": rl_record}


class Jsonl(ShardFormat):
    name = "jsonl"
    suffixes = (".jsonl",)
    needs_tokenizer = False

    def check_options(self, options: dict[str, Any]) -> None:
        if options.get("transform", "passthrough") not in TRANSFORMS:
            raise NemotronError(f"transform={options.get('transform')!r} is not known; use one of {list(TRANSFORMS)}")

    def write(self, shard: ShardInput, state, folder: Path, name: str) -> tuple[list[str], dict[str, int]]:
        transform = TRANSFORMS[shard.options.get("transform", "passthrough")]()
        counts = {"records": 0, "written": 0, "skipped": 0, "malformed": 0}
        path = folder / f"{name}.jsonl"
        with atomic.output_file(path, "w") as out:
            for offset, line in shard.lines():
                record, problem = parse_line(line)
                if problem is not None:
                    counts["malformed"] += 1
                    continue
                counts["records"] += 1
                result = transform(record)
                if result is None:
                    counts["skipped"] += 1
                    continue
                out.write(canonical_json(result, where=f"{shard.where}, line at byte {offset}") + "\n")
                counts["written"] += 1
        if not counts["written"]:
            path.unlink()
            return [], counts
        return [path.name], counts
