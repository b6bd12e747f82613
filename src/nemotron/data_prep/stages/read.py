"""Read: one work item's documents, streamed in batches, from a local file or an fsspec URL.

A JSONL item is a byte range read with one seek (on an object store, ranged reads: no worker
downloads a whole file it needs a slice of); a Parquet item is a few row groups; a text file is one
document; a built-in corpus or hub dataset is read whole by `sources.read_source`. Documents get the
ids the whole-file readers give them (`read_jsonl`: the record's "id", else "<file>:<line>";
`read_parquet`: "<file>:<row>"; `read_text`: the file's name), so a document lands in the same split
whichever way it is read. What a reader leaves out (a record without text) is counted per reason.

`mode="chat"` reads chat records (`{"messages": [...]}` lines, or Parquet rows such as the post-training
pipeline's records) for SFT: a document's text is the record's canonical JSON and its id the record's
"id", else the sha1 of that JSON; malformed lines are counted.

`mode="conversation"` reads what the nano2 SFT curation gathers, each as the conversation record of
`conversations.py` (`{"id", "category", "source", "messages"}`, canonical JSON, its id the document's):
a JSONL pool of OpenAI or ShareGPT chats (`conversations.pool_conversation`; an id-less record is
"<file>:<n>", n the 0-based line), the chatterbot corpus (`conversations.chatterbot_pool`), and
Parquet files of post-training records (`chat.records.CONVERTERS[template]`); what cannot become a
conversation is counted by reason, as the whole-file readers count it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace

from nemotron.data_prep import storage
from nemotron.data_prep.sources import Document
from nemotron.data_prep.stages.base import ItemContext, Stage
from nemotron.errors import NemotronError

BATCH_DOCUMENTS = 512


class ReadStage(Stage):
    name = "read"

    def __init__(self, mode: str = "text", template: str = "nano2"):
        """`template` (conversation mode): the chat template post-training records are converted for."""
        if mode not in ("text", "chat", "conversation"):
            raise NemotronError(f"ReadStage mode={mode!r}; use 'text', 'chat' or 'conversation'")
        if template not in ("nano2", "nano3"):  # chat.records.CONVERTERS, without importing it here
            raise NemotronError(f"ReadStage template={template!r}; use 'nano2' or 'nano3'")
        self.mode, self.template = mode, template

    def fingerprint(self) -> dict:
        return {"mode": self.mode, "template": self.template} if self.mode == "conversation" else {"mode": self.mode}

    def process(self, context: ItemContext, records: Iterator) -> Iterator[list[Document]]:
        item, batch = context.item, []
        documents = {"jsonl": self._jsonl, "parquet": self._parquet, "text": self._text,
                     "builtin": self._builtin}[item.kind](context)
        for document in documents:
            context.count(self.name, "documents")
            context.count(self.name, "bytes", len(document.text.encode()))
            batch.append(document)
            if len(batch) == BATCH_DOCUMENTS:
                yield batch
                batch = []
        if batch:
            yield batch

    # ----------------------------------------------------------------------------------------------
    # one per kind
    # ----------------------------------------------------------------------------------------------

    def _jsonl(self, context: ItemContext) -> Iterator[Document]:
        item, skipped = context.item, Counter()
        with storage.open_read(item.path) as stream:
            stream.seek(item.start)
            position, number = item.start, item.first_row - 1
            while position < item.end:
                line = stream.readline()
                if not line:
                    raise NemotronError(f"{item.path} ended early; it changed since planning, plan again")
                position, number = position + len(line), number + 1
                if line.strip():
                    document = self._record(line, item, number, skipped)
                    if document is not None:
                        yield document
        self._count_skipped(context, skipped)

    def _record(self, line: bytes, item, number: int, skipped: Counter) -> Document | None:
        from nemotron.data_prep.transforms import parse_line

        record, problem = parse_line(line)
        if self.mode == "conversation":
            from nemotron.data_prep.conversations import MALFORMED, pool_conversation

            conversation, problem = (None, MALFORMED) if problem is not None else pool_conversation(
                record, item.file, number - 1)
            if conversation is None:
                skipped[problem] += 1
                return None
            return _conversation_document(conversation, item)
        if self.mode == "chat":
            if problem is not None:
                skipped["malformed"] += 1
                return None
            return _chat_document(record, item.source)
        if problem is not None:
            raise NemotronError(f"{item.path}:{number}: {problem}; each line must be one JSON object")
        return _document(record, item, f"{item.file}:{number}", skipped)

    def _parquet(self, context: ItemContext) -> Iterator[Document]:
        import pyarrow.parquet as pq

        item, skipped = context.item, Counter()
        with storage.open_read(item.path) as stream:
            table = pq.ParquetFile(stream).read_row_groups(list(range(item.start, item.end)))
        if self.mode == "conversation":  # post-training records, converted for the template
            from nemotron.data_prep.chat.records import CONVERTERS, Inexpressible

            for record in table.to_pylist():
                try:
                    yield _conversation_document(CONVERTERS[self.template](record), item)
                except Inexpressible as why:
                    skipped[why.reason] += 1
            self._count_skipped(context, skipped)
            return
        if self.mode == "chat":  # each row a chat record (e.g. the post-training pipeline's selected.parquet)
            for record in table.to_pylist():
                yield _chat_document(record, item.source)
            return
        if item.text_field not in table.column_names:
            raise NemotronError(f"{item.path}: no column '{item.text_field}' (columns: {table.column_names}); "
                                f"set text_field to the text column")
        row = item.first_row
        for batch in table.to_batches(max_chunksize=BATCH_DOCUMENTS):
            for record in batch.to_pylist():
                document = _document(record, item, f"{item.file}:{row}", skipped)
                row += 1
                if document is not None:
                    yield document
        self._count_skipped(context, skipped)

    def _text(self, context: ItemContext) -> Iterator[Document]:
        item = context.item
        with storage.open_read(item.path) as stream:
            try:
                text = stream.read().decode("utf-8").replace("\r\n", "\n")
            except UnicodeDecodeError as error:
                raise NemotronError(f"cannot read {item.path} as UTF-8 text ({error}); "
                                    "fix or remove the file") from None
        if not text.strip():
            context.count(self.name, "skipped: empty text")
            return
        yield Document(item.file, text.strip("\n"), item.source, {"file": item.file})

    def _builtin(self, context: ItemContext) -> Iterator[Document]:
        item = context.item
        if self.mode == "conversation" and item.path == "chatterbot":
            from nemotron.data_prep.conversations import chatterbot_pool

            conversations, skipped = chatterbot_pool()
            self._count_skipped(context, skipped)
            yield from (_conversation_document(conversation, item) for conversation in conversations)
            return
        if self.mode in ("chat", "conversation"):
            from nemotron.data_prep.conversations import chatterbot_pool

            if item.path != "chatterbot":
                raise NemotronError(f"chat source {item.path!r}: use 'chatterbot' or a JSONL file of chats")
            for record in chatterbot_pool()[0]:
                yield _chat_document(record, item.source)
            return
        from nemotron.data_prep.sources import read_source

        read = read_source(item.path, text_field=item.text_field, hf_split=item.hf_split, subset=item.subset,
                           source=item.source)
        for reason, count in read.skipped.items():
            context.count(self.name, f"skipped: {reason}", count)
        for document in read.documents:
            yield document if document.source == item.source else replace(document, source=item.source)

    def _count_skipped(self, context: ItemContext, skipped: Counter) -> None:
        for reason, count in sorted(skipped.items()):
            context.count(self.name, f"skipped: {reason}", count)


def _chat_document(record: dict, source: str) -> Document:
    """A chat record as a Document: its canonical JSON, its "id" (else the sha1 of that JSON)."""
    text = json.dumps(record, ensure_ascii=False, sort_keys=True)
    return Document(str(record.get("id") or hashlib.sha1(text.encode()).hexdigest()), text, source)


def _document(record: dict, item, fallback_id: str, skipped: Counter) -> Document | None:
    """A record as a Document (what `sources._record_document` makes), or None with the reason counted."""
    text = record.get(item.text_field)
    if not isinstance(text, str):
        skipped[f"missing text field '{item.text_field}'" if text is None else f"non-text '{item.text_field}'"] += 1
        return None
    if not text.strip():
        skipped["empty text"] += 1
        return None
    doc_id = str(record["id"]) if record.get("id") is not None else fallback_id
    return Document(doc_id, text, item.source)


def _conversation_document(conversation: dict, item) -> Document:
    """A conversation record as a Document: its canonical JSON (what `write_conversations` writes)."""
    from nemotron.data_prep.conversations import FIELDS
    from nemotron.data_prep.transforms import canonical_json

    text = canonical_json({name: conversation[name] for name in FIELDS}, where=f"{item.path}: {conversation['id']}")
    return Document(conversation["id"], text, item.source)
