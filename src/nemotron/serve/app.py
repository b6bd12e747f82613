"""The HTTP side of the model server: OpenAI-compatible endpoints over one `Engine` per served model.

- `GET  /`                     the chat page (`page.html`, one static file: no build step, no CDN)
- `GET  /v1/models`            the served models, each with what it is (`nemotron`: artifact, digest, format)
- `POST /v1/chat/completions`  messages (content a string or a list of `{"type": "text"}` parts) rendered
                               in the checkpoint's own chat format (`nemotron.serve.models`)
- `POST /v1/completions`       a raw prompt (a string, or a list of one string); base models serve only this
- `GET  /health`               200 once loaded, with each engine's batch counters

Both completion endpoints take `stream: true`: server-sent events, one `data: {chunk}` line per piece
of text and `data: [DONE]` at the end, the format the `openai` client libraries parse;
`stream_options: {"include_usage": true}` adds a last chunk with empty `choices` and the `usage`.
Every answer counts `usage` (prompt, completion, total tokens) and says why it ended: `finish_reason`
"stop" (end of turn, EOS, a `stop` string, the grammar's end) or "length" (`max_tokens`, by default
what the context leaves, at most 512). A reasoning model (nano3) returns its reasoning apart from the
answer, as `reasoning_content` and `reasoning` (the two names clients read), in messages and in
deltas; `chat_template_kwargs: {"enable_thinking": false}` switches it off per request. `response_format`
`json_schema` / `json_object` constrains decoding with xgrammar; `temperature` 0 is greedy (default 1,
as OpenAI); `seed` seeds sampling. A client that disconnects mid-stream stops its generation.

Refused with a 400 and a one-line message: a body that is not a JSON object, a field of the wrong
type, `n` > 1, tools, an unknown model, a prompt that does not fit the model's context, a chat sent
to a base model, a schema xgrammar cannot compile.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse

from nemotron.errors import NemotronError
from nemotron.serve.engine import Engine, GenerationRequest, GenerationResult
from nemotron.serve.models import ServedModel
from nemotron.serve.reasoning import ReasoningSplitter

PAGE = Path(__file__).with_name("page.html")
DEFAULT_MAX_TOKENS = 512  # when a request names none: at most this, and never past the context


class _Bad(Exception):
    """A client error: answered with HTTP 400 and an OpenAI-style error body."""


def message_text(content: Any, where: str) -> str:
    """Message content as text: a string, or a list of text parts (what Data Designer sends)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _Bad(f"{where}.content[{i}]: only text parts are supported, got {kind!r}")
        return "".join(texts)
    raise _Bad(f"{where}.content: expected a string or a list of text parts")


def create_app(served: list[tuple[ServedModel, Engine]], seed: int = 0) -> FastAPI:
    """The FastAPI app: HTTP <-> engine requests. Handlers await the engines' futures."""
    app = FastAPI(title="nemotron.serve")
    by_name = {model.name: (model, engine) for model, engine in served}
    created = int(time.time())
    counter = itertools.count()

    def pick(body: dict) -> tuple[ServedModel, Engine]:
        name = body.get("model")
        if name is None:
            return served[0]
        if name not in by_name:
            raise _Bad(f"model {name!r} is not served here; this server serves {sorted(by_name)}")
        return by_name[name]

    def request_for(body: dict, prompt_ids: list[int], engine: Engine) -> GenerationRequest:
        if int(body.get("n") or 1) != 1:
            raise _Bad("n > 1 is not supported; send one request per completion")
        if body.get("tools"):
            raise _Bad("tools are not supported by this server")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _Bad("stop must be a string or a list of strings")
        response_format = body.get("response_format") or {"type": "text"}
        kind = response_format.get("type", "text")
        schema = None
        if kind == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise _Bad("response_format.json_schema.schema must be a JSON schema object")
        elif kind not in ("text", "json_object"):
            raise _Bad(f"response_format.type {kind!r} is not supported (text, json_object, json_schema)")
        room = engine.max_positions - len(prompt_ids)
        if room < 1:
            raise _Bad(f"the prompt ({len(prompt_ids)} tokens) does not fit the model's context of "
                       f"{engine.max_positions} tokens; shorten the conversation")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or min(DEFAULT_MAX_TOKENS, room)
        temperature = body.get("temperature")
        return GenerationRequest(
            prompt_ids=prompt_ids, max_tokens=int(max_tokens),
            temperature=1.0 if temperature is None else float(temperature), top_p=float(body.get("top_p") or 1.0),
            seed=int(body["seed"]) if body.get("seed") is not None else seed + next(counter),
            stop=stop, json_schema=schema, json_object=kind == "json_object")

    def submit(engine: Engine, request: GenerationRequest):
        try:
            return engine.submit(request)
        except NemotronError as bad:
            raise _Bad(str(bad)) from None

    @app.exception_handler(_Bad)
    async def bad_request(_: Request, exc: _Bad):
        return JSONResponse(status_code=400, content={"error": {"message": str(exc), "type": "invalid_request_error",
                                                                "code": 400}})

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/health")
    async def health():
        return {"status": "ok", "models": list(by_name), "engines": {m.name: dict(e.stats) for m, e in served}}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [
            {"id": m.name, "object": "model", "created": created, "owned_by": "nemotron",
             "nemotron": {**m.identity, "format": m.format, "reasons": m.reasons,
                          "parameters": sum(p.numel() for p in m.model.parameters()),
                          "context": e.max_positions}} for m, e in served]}

    @app.post("/v1/chat/completions")
    async def chat_completions(raw: Request):
        body = await _json(raw)
        model, engine = pick(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _Bad("messages must be a non-empty list of {role, content} objects")
        plain = [{"role": m.get("role", "user"), "content": message_text(m.get("content"), f"messages[{i}]")}
                 for i, m in enumerate(messages)]
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = kwargs.get("enable_thinking", True) if isinstance(kwargs, dict) else True
        if not isinstance(thinking, bool):
            raise _Bad("chat_template_kwargs.enable_thinking must be true or false")
        try:
            prompt_ids = model.prompt_ids(plain, enable_thinking=thinking)
        except NemotronError as bad:
            raise _Bad(str(bad)) from None
        request = _checked(lambda: request_for(body, prompt_ids, engine))
        splitter = ReasoningSplitter(thinking) if model.reasons else None
        reply = Reply("chat.completion", model.name, request, splitter)
        if body.get("stream"):
            return reply.stream(engine, submit, raw, _include_usage(body))
        result = await asyncio.wrap_future(submit(engine, request))
        return reply.whole(result)

    @app.post("/v1/completions")
    async def completions(raw: Request):
        body = await _json(raw)
        model, engine = pick(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str) or not prompt:
            raise _Bad("prompt must be a non-empty string (or a list of one string)")
        request = _checked(lambda: request_for(body, model.completion_ids(prompt), engine))
        reply = Reply("text_completion", model.name, request, None)
        if body.get("stream"):
            return reply.stream(engine, submit, raw, _include_usage(body))
        result = await asyncio.wrap_future(submit(engine, request))
        return reply.whole(result)

    return app


class Reply:
    """One answer, whole or streamed, for a chat (`chat.completion`) or a raw prompt (`text_completion`)."""

    def __init__(self, kind: str, model: str, request: GenerationRequest, splitter: ReasoningSplitter | None):
        self.kind, self.model, self.request, self.splitter = kind, model, request, splitter
        self.id = f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def usage(self, result: GenerationResult) -> dict:
        prompt, completion = len(self.request.prompt_ids), len(result.completion_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def fields(self, reasoning: str, answer: str) -> dict:
        """The text of a message or a delta: the answer in `content`, reasoning under both names."""
        out: dict[str, Any] = {"content": answer} if answer or not reasoning else {}
        if reasoning:
            out["reasoning_content"] = out["reasoning"] = reasoning
        return out

    def whole(self, result: GenerationResult) -> dict:
        common = {"id": self.id, "object": self.kind, "created": self.created, "model": self.model,
                  "usage": self.usage(result)}
        if self.kind == "text_completion":
            return {**common, "choices": [{"index": 0, "text": result.text, "finish_reason": result.finish_reason,
                                           "logprobs": None}]}
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if self.splitter is not None:
            first, last = self.splitter.feed(result.text), self.splitter.finish()
            reasoning, answer = first[0] + last[0], first[1] + last[1]
            message = {"role": "assistant", "content": answer or None,
                       "reasoning_content": reasoning or None, "reasoning": reasoning or None}
        return {**common, "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason,
                                       "logprobs": None}]}

    def chunk(self, piece: dict | None, finish_reason: str | None = None, usage: dict | None = None,
              with_usage: bool = False) -> str:
        if self.kind == "text_completion":
            choices = [] if piece is None else [{"index": 0, "text": piece.get("text", ""), "logprobs": None,
                                                 "finish_reason": finish_reason}]
            kind = "text_completion"
        else:
            choices = [] if piece is None else [{"index": 0, "delta": piece, "logprobs": None,
                                                 "finish_reason": finish_reason}]
            kind = "chat.completion.chunk"
        data: dict[str, Any] = {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                                "choices": choices}
        if with_usage:
            data["usage"] = usage
        return f"data: {json.dumps(data)}\n\n"

    def pieces(self, text: str, final: bool) -> list[dict]:
        """The deltas `text` (new completion text) gives; `final` flushes what the splitter held."""
        if self.kind == "text_completion":
            return [{"text": text}] if text else []
        if self.splitter is None:
            return [{"content": text}] if text else []
        reasoning, answer = self.splitter.feed(text)
        if final:
            rest = self.splitter.finish()
            reasoning, answer = reasoning + rest[0], answer + rest[1]
        return [self.fields(r, "") for r in [reasoning] if r] + [{"content": a} for a in [answer] if a]

    def stream(self, engine: Engine, submit, raw: Request, include_usage: bool) -> StreamingResponse:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[str | None] = asyncio.Queue()
        self.request.on_text = lambda text: loop.call_soon_threadsafe(queue.put_nowait, text)
        future = submit(engine, self.request)  # a refused request is a 400 before any event is sent
        future.add_done_callback(lambda _: loop.call_soon_threadsafe(queue.put_nowait, None))

        async def events() -> AsyncIterator[str]:
            try:
                first = {"role": "assistant", "content": ""} if self.kind == "chat.completion" else {"text": ""}
                yield self.chunk(first, with_usage=include_usage)
                while (text := await queue.get()) is not None:
                    for piece in self.pieces(text, final=False):
                        yield self.chunk(piece, with_usage=include_usage)
                try:
                    result = future.result()
                except Exception as error:  # the engine failed this batch: say so in the stream, then end it
                    yield f"data: {json.dumps({'error': {'message': str(error).splitlines()[0], 'code': 500}})}\n\n"
                    return
                for piece in self.pieces("", final=True):
                    yield self.chunk(piece, with_usage=include_usage)
                yield self.chunk({} if self.kind == "chat.completion" else {"text": ""}, result.finish_reason,
                                 with_usage=include_usage)
                if include_usage:
                    yield self.chunk(None, usage=self.usage(result), with_usage=True)
                yield "data: [DONE]\n\n"
            finally:  # the client went away (or the stream ended): stop generating for it
                self.request.cancelled.set()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _include_usage(body: dict) -> bool:
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")) if isinstance(options, dict) else False


def _checked(build):
    """Build a request; a field of the wrong type (`"max_tokens": "many"`) is a one-line 400."""
    try:
        return build()
    except (TypeError, ValueError, AttributeError) as error:
        raise _Bad(f"a field of the request has the wrong type: {str(error).splitlines()[0]}") from None


async def _json(raw: Any) -> dict:
    try:
        body = await raw.json()
    except ValueError:
        raise _Bad("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _Bad("the request body must be a JSON object")
    return body
