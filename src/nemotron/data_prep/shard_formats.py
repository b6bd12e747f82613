"""The packed-Parquet and JSONL shard writers of a sharded run (`shards.py` runs, receipts, resumes).

`shards.py` cuts a JSONL input into byte ranges and makes one shard per range wherever the executor
puts it; this module writes what one shard holds for the two formats besides bin/idx:

- "packed_parquet" (SFT): each line is a chat (`{"messages": [...]}`, OpenAI roles). Its tokens and
  its exact assistant-only loss mask come from the run's `chat_template` (a name in
  `nemotron.data_prep.chat.templates`: nano2, or nano3 with reasoning and tool calls), and the shard's
  conversations are packed into rows of `pack_size` tokens (`packing.pack_conversations`,
  first-fit-decreasing) and written as `shard_00003.parquet`, the packed Parquet Megatron-Bridge reads.
  Packing per shard, as the Nemotron cookbook does, keeps a shard independent of every other: any
  worker can make it, in any order, and the bytes are fixed.
- "jsonl" (SFT / RL records): each line goes through one named transform (`transforms.py`:
  passthrough, openai_chat, sharegpt, sft) and is written canonically to `shard_00003.jsonl`.

Every file is written atomically into the folder it is given (the run folder, or a scratch folder
that `shards.py` then publishes to an object store). What is left out is counted, never dropped
silently: malformed JSONL lines and records a transform skips, conversations truncated or dropped
by packing.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nemotron import atomic
from nemotron.data_prep.chat.templates import chat_template_named
from nemotron.data_prep.packing import PackingConfig, pack_conversations, write_packed_parquet
from nemotron.data_prep.transforms import _canonical_json, _parse_line, openai_chat, passthrough, sft, sharegpt
from nemotron.errors import NemotronError

# Transforms a JSONL run can name (the name goes into the run hash, so it must say what it does).
TRANSFORMS = {"passthrough": passthrough, "openai_chat": openai_chat, "sharegpt": sharegpt, "sft": sft}


def check_options(output_format: str, options: dict[str, Any]) -> None:
    """Refuse a format's parameters before any work starts (the driver calls this when planning)."""
    if output_format == "packed_parquet":
        PackingConfig(pack_size=options["pack_size"], algorithm=options.get("algorithm", "first_fit_decreasing"),
                      overflow=options.get("overflow", "truncate"), seed=options.get("seed", 0))
        chat_template_named(options.get("chat_template", "nano2"))  # an unknown name is refused here
    elif output_format == "jsonl" and options.get("transform", "passthrough") not in TRANSFORMS:
        raise NemotronError(f"transform={options.get('transform')!r} is not known; use one of {list(TRANSFORMS)}")


def format_state(output_format: str, tokenizer_files: dict[str, bytes]):
    """What a worker builds once per process: the chat tokenizer for packed Parquet, nothing for JSONL."""
    if output_format != "packed_parquet":
        return None
    from nemotron.data_prep.tokenizer import load_tokenizer

    folder = Path(tempfile.mkdtemp(prefix="nemotron-tokenizer-"))
    try:  # the folder's files travelled with the job: a worker on another node needs no shared disk
        for name, data in tokenizer_files.items():
            (folder / name).write_bytes(data)
        tokenizer = load_tokenizer(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return tokenizer


def write_format_shard(
    output_format: str,
    options: dict[str, Any],
    state,
    lines: Iterator[tuple[int, bytes]],
    folder: Path,
    name: str,
    where: str,
) -> tuple[list[str], dict[str, int]]:
    """Write shard `name` of `output_format` into `folder`; returns (file names, counts)."""
    if output_format == "packed_parquet":
        return _packed_parquet_shard(options, state, lines, folder, name, where)
    return _jsonl_shard(options, lines, folder, name, where)


def _packed_parquet_shard(options, tokenizer, lines, folder: Path, name: str, where: str):
    from nemotron.data_prep.conversations import check_chat_tokenizer

    template = chat_template_named(options.get("chat_template", "nano2"))
    check_chat_tokenizer(tokenizer, "the run's tokenizer", template.name)
    field, loss_on = options.get("messages_field", "messages"), options.get("loss_on", "assistant")
    records, conversations = 0, []
    for offset, line in lines:
        records += 1
        record, problem = _parse_line(line)
        if problem is None and not isinstance(record.get(field), list):
            problem = f"no {field!r} list"
        if problem is not None:
            raise NemotronError(f"{where}, line at byte {offset}: {problem}; each line must be "
                                f'{{"{field}": [{{"role": ..., "content": ...}}, ...]}}')
        conversations.append(template.tokenize_conversation(tokenizer, record[field], loss_on=loss_on,
                                                            conversation_id=f"{where} byte {offset}"))
    counts = {"records": records, "conversations": 0, "rows": 0, "tokens": 0, "loss_tokens": 0,
              "padding": 0, "truncated": 0, "truncated_tokens": 0, "dropped": 0}
    if not conversations:
        return [], counts
    config = PackingConfig(pack_size=options["pack_size"], algorithm=options.get("algorithm", "first_fit_decreasing"),
                           overflow=options.get("overflow", "truncate"), seed=options.get("seed", 0))
    rows, stats = pack_conversations(conversations, config, show_progress=False)
    counts |= {key: getattr(stats, key) for key in counts if key != "records"}
    if not rows:  # every conversation was dropped as too long: counted, and the shard holds no file
        return [], counts
    write_packed_parquet(rows, folder / f"{name}.parquet", config.pack_size)
    return [f"{name}.parquet"], counts


def _jsonl_shard(options, lines, folder: Path, name: str, where: str):
    transform = TRANSFORMS[options.get("transform", "passthrough")]()
    counts = {"records": 0, "written": 0, "skipped": 0, "malformed": 0}
    path = folder / f"{name}.jsonl"
    with atomic.output_file(path, "w") as out:
        for offset, line in lines:
            record, problem = _parse_line(line)
            if problem is not None:
                counts["malformed"] += 1
                continue
            counts["records"] += 1
            result = transform(record)
            if result is None:
                counts["skipped"] += 1
                continue
            out.write(_canonical_json(result, where=f"{where}, line at byte {offset}") + "\n")
            counts["written"] += 1
    if not counts["written"]:
        path.unlink()
        return [], counts
    return [path.name], counts

