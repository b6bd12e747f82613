"""Post-training records -> a chat template's conversations, one record at a time.

The post-training pipeline's `selected.parquet` holds normalized records (Harmony messages and a loss
mode, `nemotron.data_prep.post_training.schema`); an SFT step trains on them in its own chat template.
Each record is converted alone (`nemotron.data_prep.chat.records`), so any worker converts its own
work item; a record the template cannot express (tool calls in nano2, say) is dropped and counted by
reason. Documents of the other sources pass through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

from nemotron.data_prep.sources import Document
from nemotron.data_prep.stages.base import ItemContext, Stage
from nemotron.errors import NemotronError


class RecordsToChatStage(Stage):
    name = "records"

    def __init__(self, template: str, sources: tuple[str, ...]):
        """`sources`: the blend labels whose documents are normalized post-training records."""
        from nemotron.data_prep.chat.records import CONVERTERS

        if template not in CONVERTERS:
            raise NemotronError(f"no record converter for chat template {template!r}; use one of "
                                f"{', '.join(CONVERTERS)}")
        self.template, self.sources = template, tuple(sources)

    def fingerprint(self) -> dict:
        return {"template": self.template, "sources": list(self.sources)}

    def process(self, context: ItemContext, records: Iterator[list[Document]]) -> Iterator[list[Document]]:
        from nemotron.data_prep.chat.records import CONVERTERS, Inexpressible

        convert = CONVERTERS[self.template]
        for batch in records:
            kept = []
            for document in batch:
                if document.source not in self.sources:
                    kept.append(document)
                    continue
                try:
                    conversation = convert(json.loads(document.text))
                except Inexpressible as why:
                    context.count(self.name, f"skipped: {why.reason}")
                    continue
                context.count(self.name, f"loss mode: {conversation.get('loss_mode', 'assistant')}")
                kept.append(replace(document, text=json.dumps(conversation, ensure_ascii=False, sort_keys=True)))
            yield kept
