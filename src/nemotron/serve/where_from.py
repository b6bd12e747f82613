"""`POST /v1/trace`: where a text comes from, the spans of it found word for word in a served model's training data.

The chat page's "where from" (compare view) asks it once per served stage with one stage's answer, and marks in
that answer the spans each stage's training data holds. It is `python -m nemotron.trace` behind the server:

    request   {"text": "I am not yet.", "model": "nano2-stage2_alignment", "min_tokens": null, "max_sources": null}
    answer    {"object": "trace", "model", "checkpoint", "text", "min_tokens", "datasets": [{path, type, digest}],
               "spans": [{start, end, char_start, char_end, text, num_tokens, occurrences,
                          sources: [{dataset, dataset_type, document, position, context}]}]}

`model` is a served model's id (default: as the completion endpoints pick it); `min_tokens` the shortest span
reported (default: `Tracer.default_min_tokens`: `DEFAULT_MIN_TOKENS`, or a short text's length less one, as the
command's); `max_sources` the occurrences named per span in each dataset that holds it (`DEFAULT_MAX_SOURCES`).
The training data is found as the command finds it: from the served checkpoint artifact's lineage (its
recorded inputs, followed upstream: the checkpoint it was fine-tuned from, that one's dataset, ...;
`nemotron.trace.corpora`), so a DPO model's spans may come from its preference pairs, its SFT conversations or
the pretraining shards, and each source says which. Each dataset's suffix-array index is built on the first
request that needs it, beside the dataset (`.trace-index/` in the run's stage folder, or
`$NEMOTRON_TRACE_INDEX_DIR`), as the command builds it, and reused by both; the tracers stay loaded
(`nemotron.trace.tracer_for`). Tracing runs in a worker thread, one request at a time (two stages share
upstream datasets, whose index is built once), so the engines keep decoding meanwhile.

Refused with a 400 and a one-line OpenAI-shaped error: a body that is not a JSON object; `text` missing, empty,
not a string or holding a lone surrogate; `min_tokens` < 1; `max_sources` outside [1, MAX_SOURCES]; an unknown
model; and, with `code` `no_training_data`, a model that is not a checkpoint artifact (SmolLM2, a Hugging Face
folder: no recorded training data), a checkpoint whose lineage names no training dataset (an artifact saved
without inputs), or a dataset re-made since the model was trained on it.
"""

from __future__ import annotations

import asyncio
import threading

from nemotron.errors import one_line
from nemotron.serve.validation import BadRequest, number, request_body

MAX_SOURCES = 1000  # occurrences named per span and dataset: a bound on the answer (each carries a snippet)
TRACE_BODY = request_body({
    "text": {"type": "string", "minLength": 1, "description": "the text to trace, e.g. a model's answer"},
    "model": {"type": "string",
              "description": "a served model's id (GET /v1/models), whose training data is searched"},
    "min_tokens": {"type": ["integer", "null"], "minimum": 1},
    "max_sources": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_SOURCES},
}, ["text"])
_ONE_AT_A_TIME = threading.Lock()  # index builds write files; a lookup once built is quick (nemotron.trace)


def traced_text(body: dict) -> str:
    text = body.get("text")
    if not isinstance(text, str) or not text:
        raise BadRequest("Invalid 'text': expected the non-empty string to trace (e.g. a model's answer)", "text",
                         "invalid_value")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate ("\ud800") is valid JSON, but no tokenizer's text
        raise BadRequest("Invalid 'text': it holds a lone UTF-16 surrogate, which is no character", "text",
                         "invalid_value") from None
    return text


def trace(body: dict, checkpoint: str | None, name: str) -> dict:
    """The answer of /v1/trace for `body` against the training data of the checkpoint at `checkpoint`
    (None: the model is not a checkpoint artifact). Blocking: run it in a worker thread."""
    from nemotron.trace import DEFAULT_MAX_SOURCES, tracer_for

    text = traced_text(body)
    min_tokens = number(body, "min_tokens", 1, integer=True)
    max_sources = number(body, "max_sources", 1, MAX_SOURCES, integer=True) or DEFAULT_MAX_SOURCES
    if checkpoint is None:
        raise BadRequest(f"model {name!r} is not a checkpoint artifact a training step wrote, so its training data "
                         "is unknown; trace a recipe run's checkpoint (serve runs/nano2)", "model", "no_training_data")
    with _ONE_AT_A_TIME:
        try:
            result, _ = tracer_for(checkpoint).trace(text, min_tokens, max_sources)
        except Exception as error:  # a NemotronError, or the read of a file its artifact recorded missing
            line = one_line(error)
            if line is None:
                raise
            raise BadRequest(f"model {name!r}: {line}", "model", "no_training_data") from None
    return {"object": "trace", "model": name, "checkpoint": result.pop("model"), **result}


async def where_from(body: dict, models) -> dict:
    """/v1/trace over the served models (`app.ServedModels`): the named model's checkpoint, traced off the loop."""
    model, _ = models.pick(body)
    checkpoint = model.identity.get("path")  # a checkpoint artifact's folder (SmolLM2 has none)
    return await asyncio.to_thread(trace, body, checkpoint, model.name)
