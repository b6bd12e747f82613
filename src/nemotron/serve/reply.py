"""One OpenAI-shaped answer of the server, whole (a JSON body) or streamed (server-sent events).

`Reply` turns the engine's `GenerationResult`s into a `chat.completion` (one choice, the reasoning of a
reasoning model apart from its answer) or a `text_completion` (a choice per prompt, the prompt first with
`echo`), with the log-probabilities in the OpenAI API's shapes (`nemotron.serve.app`'s docstring), and streams
them as the engine decodes: one `data: {chunk}` line per piece of text, `data: [DONE]` at the end.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from nemotron.serve.engine import Engine, GenerationRequest, GenerationResult
from nemotron.serve.models import ServedModel
from nemotron.serve.reasoning import ReasoningSplitter


class Reply:
    """One answer, whole or streamed, for a chat (`chat.completion`, one choice) or raw prompts
    (`text_completion`, a choice per prompt)."""

    def __init__(self, kind: str, model: ServedModel, engine: Engine, requests: list[GenerationRequest],
                 splitters: list[ReasoningSplitter | None], echo: list[str | None] | None = None):
        """`echo`: per prompt the text to repeat before its completion (None: decode its token ids)."""
        self.kind, self.model, self.engine, self.requests, self.splitters = kind, model, engine, requests, splitters
        self.echo = echo
        self.id = f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def usage(self, results: list[GenerationResult]) -> dict:
        prompt = sum(len(r.prompt_ids) for r in self.requests)
        completion = sum(len(r.completion_ids) for r in results)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def fields(self, reasoning: str, answer: str) -> dict:
        """The text of a message or a delta: the answer in `content`, reasoning under both names."""
        out: dict[str, Any] = {"content": answer} if answer or not reasoning else {}
        if reasoning:
            out["reasoning_content"] = out["reasoning"] = reasoning
        return out

    # ------------------------------------------------------------------ log-probabilities, as OpenAI shapes them

    def token(self, token_id: int) -> tuple[str, list[int]]:
        """A token's text and its bytes (a byte-level token may hold half a UTF-8 character)."""
        raw = self.engine.token_bytes[token_id] if token_id < len(self.engine.token_bytes) else b""
        return raw.decode("utf-8", errors="replace"), list(raw)

    def logprobs(self, index: int, entries: list) -> dict | None:
        """The `logprobs` of a choice (or of a chunk) holding `entries`: (token id, TokenLogprob or None)."""
        if self.requests[index].logprobs is None or not entries:
            return None
        if self.kind == "chat.completion":
            def one(token_id: int, logprob: float) -> dict:
                text, raw = self.token(token_id)
                return {"token": text, "logprob": logprob, "bytes": raw}
            return {"content": [{**one(t, e.logprob), "top_logprobs": [one(i, lp) for i, lp in e.top]}
                                for t, e in entries]}
        out: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        offset = 0
        for token_id, entry in entries:
            text = self.token(token_id)[0]
            out["tokens"].append(text)
            out["text_offset"].append(offset)
            offset += len(text)
            out["token_logprobs"].append(None if entry is None else entry.logprob)
            top = None
            if entry is not None:  # the k most likely, then the chosen token (OpenAI: up to k + 1 entries)
                top = {}
                for i, lp in [*entry.top, (token_id, entry.logprob)]:
                    top.setdefault(self.token(i)[0], lp)
            out["top_logprobs"].append(top)
        return out

    def entries(self, result: GenerationResult) -> list:
        return list(zip(result.completion_ids, result.logprobs or [], strict=False))

    # ------------------------------------------------------------------ whole

    def whole(self, results: list[GenerationResult]) -> dict:
        common = {"id": self.id, "object": self.kind, "created": self.created, "model": self.model.name,
                  "usage": self.usage(results)}
        if self.kind == "text_completion":
            return {**common, "choices": [self.text_choice(i, r) for i, r in enumerate(results)]}
        result, splitter = results[0], self.splitters[0]
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if splitter is not None:
            first, last = splitter.feed(result.text), splitter.finish()
            reasoning, answer = first[0] + last[0], first[1] + last[1]
            message = {"role": "assistant", "content": answer or None,
                       "reasoning_content": reasoning or None, "reasoning": reasoning or None}
        return {**common, "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason,
                                       "logprobs": self.logprobs(0, self.entries(result))}]}

    def text_choice(self, index: int, result: GenerationResult) -> dict:
        text, entries = result.text, self.entries(result)
        if self.echo is not None:
            prompt_ids = self.requests[index].prompt_ids
            given = self.echo[index]
            text = (self.model.tokenizer.decode(prompt_ids) if given is None else given) + text
            entries = list(zip(prompt_ids, result.prompt_logprobs or [], strict=False)) + entries
        return {"index": index, "text": text, "finish_reason": result.finish_reason,
                "logprobs": self.logprobs(index, entries)}

    # ------------------------------------------------------------------ streamed

    def chunk(self, index: int | None, piece: dict | None, finish_reason: str | None = None,
              logprobs: dict | None = None, usage: dict | None = None, with_usage: bool = False) -> str:
        if self.kind == "text_completion":
            choices = [] if piece is None else [{"index": index, "text": piece.get("text", ""), "logprobs": logprobs,
                                                 "finish_reason": finish_reason}]
            kind = "text_completion"
        else:
            choices = [] if piece is None else [{"index": index, "delta": piece, "logprobs": logprobs,
                                                 "finish_reason": finish_reason}]
            kind = "chat.completion.chunk"
        data: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model.name,
                                "choices": choices}
        if with_usage:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n"

    def pieces(self, index: int, text: str, final: bool) -> list[dict]:
        """The deltas `text` (new completion text) gives; `final` flushes what the splitter held."""
        splitter = self.splitters[index]
        if self.kind == "text_completion":
            return [{"text": text}] if text else []
        if splitter is None:
            return [{"content": text}] if text else []
        reasoning, answer = splitter.feed(text)
        if final:
            rest = splitter.finish()
            reasoning, answer = reasoning + rest[0], answer + rest[1]
        return [self.fields(r, "") for r in [reasoning] if r] + [{"content": a} for a in [answer] if a]

    def stream(self, submit_all, include_usage: bool) -> StreamingResponse:
        """Server-sent events of every choice as its engine rows decode: the engine thread puts (choice, what,
        value) on a queue (text, the tokens behind it, done); each text chunk carries the tokens not yet sent."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, str, Any]] = asyncio.Queue()

        def put(item: tuple[int, str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        for index, request in enumerate(self.requests):
            request.on_text = lambda text, i=index: put((i, "text", text))
            request.on_logprobs = lambda entries, i=index: put((i, "logprobs", entries))
        futures = submit_all()  # a refused request is a 400 before any event is sent
        for index, future in enumerate(futures):
            future.add_done_callback(lambda _, i=index: put((i, "done", None)))

        async def events() -> AsyncIterator[str]:
            pending: list[list] = [[] for _ in self.requests]  # tokens whose text has not been sent yet
            sent = [0] * len(self.requests)  # tokens each choice has carried so far
            results: list[GenerationResult | None] = [None] * len(self.requests)

            def take(i: int) -> dict | None:
                entries = [(e.token, e) for e in pending[i]]
                sent[i] += len(entries)
                pending[i] = []
                return self.logprobs(i, entries)

            try:
                first = {"role": "assistant", "content": ""} if self.kind == "chat.completion" else {"text": ""}
                for i in range(len(self.requests)):
                    yield self.chunk(i, first, with_usage=include_usage)
                while any(r is None for r in results):
                    i, what, value = await queue.get()
                    if what == "logprobs":
                        pending[i] += value
                    elif what == "text":
                        for piece in self.pieces(i, value, final=False):
                            yield self.chunk(i, piece, logprobs=take(i), with_usage=include_usage)
                    else:
                        try:
                            results[i] = result = futures[i].result()
                        except Exception as error:  # the engine failed this batch: say so in the stream, end it
                            yield f"data: {json.dumps({'error': {'message': str(error).splitlines()[0]}})}\n\n"
                            return
                        for piece in self.pieces(i, "", final=True):
                            yield self.chunk(i, piece, logprobs=take(i), with_usage=include_usage)
                        rest = self.entries(result)[sent[i]:]  # tokens with no text of their own (EOS)
                        yield self.chunk(i, {} if self.kind == "chat.completion" else {"text": ""},
                                         result.finish_reason, self.logprobs(i, rest), with_usage=include_usage)
                if include_usage:
                    yield self.chunk(None, None, usage=self.usage(results), with_usage=True)
                yield "data: [DONE]\n\n"
            finally:  # the client went away (or the stream ended): stop generating for it
                for request in self.requests:
                    request.cancelled.set()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
