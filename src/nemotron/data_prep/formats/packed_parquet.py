"""Packed Parquet (SFT): chats tokenized with an exact assistant-only loss mask, packed into rows.

Each line is a chat (`{"messages": [...]}`, OpenAI roles). Its tokens and its exact loss mask come
from the run's `chat_template` (a name in `nemotron.data_prep.chat.templates`: nano2, or nano3 with
reasoning and tool calls), and the shard's conversations are
packed into rows of `pack_size` tokens (`packing.pack_conversations`, first-fit-decreasing) and
written as `shard_00003.parquet`, the packed Parquet Megatron-Bridge reads. Packing per shard, as the
Nemotron cookbook does, keeps a shard independent of every other: any worker can make it, in any
order, and the bytes are fixed. Conversations truncated or dropped by packing are counted.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from nemotron.data_prep.chat.templates import chat_template_named
from nemotron.data_prep.formats.base import ShardFormat, ShardInput
from nemotron.errors import NemotronError


def _packing_config(options: dict[str, Any]):
    from nemotron.data_prep.packing import PackingConfig  # pyarrow: only when this format is used

    return PackingConfig(pack_size=options["pack_size"], algorithm=options.get("algorithm", "first_fit_decreasing"),
                         overflow=options.get("overflow", "truncate"), seed=options.get("seed", 0))


class PackedParquet(ShardFormat):
    name = "packed_parquet"
    suffixes = (".parquet",)

    def check_options(self, options: dict[str, Any]) -> None:
        _packing_config(options)
        template = chat_template_named(options.get("chat_template", "nano2"))  # an unknown name is refused here
        known = {"pack_size", "algorithm", "overflow", "seed", "chat_template", "messages_field", "loss_on",
                 *template.settings}
        if unknown := sorted(set(options) - known):
            raise NemotronError(f"packed_parquet options {unknown} are not known with chat template "
                                f"{template.name!r}; use {sorted(known)}")

    def setup_payload(self, tokenizer_json: str, tokenizer_dir: Path | None) -> dict[str, bytes]:
        # The chat markers and template live in the folder's config, so the whole folder travels.
        return {path.name: path.read_bytes() for path in sorted(tokenizer_dir.iterdir()) if path.is_file()}

    def setup(self, payload: dict[str, bytes]):
        from nemotron.data_prep.tokenizer import load_tokenizer

        folder = Path(tempfile.mkdtemp(prefix="nemotron-tokenizer-"))
        try:  # the folder's files travelled with the job: a worker on another node needs no shared disk
            for name, data in payload.items():
                (folder / name).write_bytes(data)
            tokenizer = load_tokenizer(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return tokenizer

    def write(self, shard: ShardInput, state, folder: Path, name: str) -> tuple[list[str], dict[str, int]]:
        from nemotron.data_prep.conversations import check_chat_tokenizer
        from nemotron.data_prep.packing import pack_conversations, write_packed_parquet
        from nemotron.data_prep.transforms import parse_line

        options = shard.options
        template = chat_template_named(options.get("chat_template", "nano2"))
        check_chat_tokenizer(state, "the run's tokenizer", template.name)  # the template, not only the markers
        field, loss_on = options.get("messages_field", "messages"), options.get("loss_on", "assistant")
        settings = {key: options[key] for key in template.settings if key in options}
        records, conversations = 0, []
        for offset, line in shard.lines():
            records += 1
            record, problem = parse_line(line)
            if problem is None and not isinstance(record.get(field), list):
                problem = f"no {field!r} list"
            if problem is not None:
                raise NemotronError(f"{shard.where}, line at byte {offset}: {problem}; each line must be "
                                    f'{{"{field}": [{{"role": ..., "content": ...}}, ...]}}')
            if record.get("loss_mode") is not None and template.tokenize_record is not None:
                conversations.append(template.tokenize_record(state, record))  # masked by its own loss mode
            else:
                conversations.append(template.tokenize_conversation(
                    state, record[field], loss_on=loss_on, conversation_id=f"{shard.where} byte {offset}", **settings))
        counts = {"records": records, "conversations": 0, "rows": 0, "tokens": 0, "loss_tokens": 0,
                  "padding": 0, "truncated": 0, "truncated_tokens": 0, "dropped": 0}
        if not conversations:
            return [], counts
        config = _packing_config(options)
        rows, stats = pack_conversations(conversations, config, show_progress=False)
        counts |= {key: getattr(stats, key) for key in counts if key != "records"}
        if not rows:  # every conversation was dropped as too long: counted, and the shard holds no file
            return [], counts
        write_packed_parquet(rows, folder / f"{name}.parquet", config.pack_size)
        return [f"{name}.parquet"], counts
