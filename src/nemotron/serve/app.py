"""The HTTP side of the model server: OpenAI-compatible endpoints over one `Engine` per served model.

- `GET  /`                     the chat page (`page.html`, one static file: no build step, no CDN)
- `GET  /v1/models`            the served models, each with what it is (`nemotron`: artifact, digest, format)
- `POST /v1/chat/completions`  messages (content a string or a list of `{"type": "text"}` parts) rendered
                               in the checkpoint's own chat format (`nemotron.serve.models`)
- `POST /v1/completions`       raw prompts: a string, a list of token ids, or a list of either (one choice
                               per prompt, in order, its `index` the prompt's); base models serve only this
- `GET  /health`               200 once loaded, with each engine's batch counters and each model's device

Both completion endpoints take `stream: true`: server-sent events, one `data: {chunk}` line per piece
of text and `data: [DONE]` at the end, the format the `openai` client libraries parse;
`stream_options: {"include_usage": true}` adds a last chunk with empty `choices` and the `usage`.
Every answer counts `usage` (prompt, completion, total tokens) and says why it ended: `finish_reason`
"stop" (end of turn, EOS, a `stop` string, the grammar's end) or "length" (`max_tokens`, by default
what the context leaves, at most 512). A reasoning model (nano3) returns its reasoning apart from the
answer, as `reasoning_content` and `reasoning` (the two names clients read), in messages and in
deltas; `chat_template_kwargs: {"enable_thinking": false}` switches it off per request. `response_format`
`json_schema` / `json_object` constrains decoding with xgrammar; `temperature` 0 is greedy; a request that
names no `temperature` / `top_p` gets the model's default sampling (`serve.models.DEFAULT_SAMPLING`: greedy,
not OpenAI's 1, so the API, the terminal chat and the page answer alike; /v1/models shows it as `sampling`);
`seed` seeds sampling. A client that disconnects mid-stream stops its generation.

Log-probabilities, in the OpenAI API's shapes (and vLLM's): chat `logprobs: true` with `top_logprobs: k`
(0-20) gives `choices[].logprobs.content[]` = `{token, logprob, bytes, top_logprobs: [k x {token, logprob,
bytes}]}`; completions `logprobs: k` (0-20, as vLLM; OpenAI stops at 5) gives `choices[].logprobs` =
`{tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}`, each top dict the k most likely
tokens plus the chosen one (so up to k+1, as OpenAI says). Streamed, each chunk carries the tokens whose
text it brings. The values are the model's own log-softmax at each position, before temperature, top-p and
the grammar mask (vLLM's default "raw" log-probs): what a forward pass over prompt + completion gives,
whatever the sampling settings (prompt scores equal it exactly; decoded tokens to float32 rounding: on
SmolLM2-135M the cached decode differs from one full forward pass by up to 3e-5, as transformers' own cached
`generate` does; on the tiny nano2 models by less than 1e-5). One entry per completion token that `usage`
counts (the end-of-turn token included). `bytes` are the token's own bytes, so a token holding half a UTF-8
character is exact there; `token` is those bytes decoded (U+FFFD for the half), and `text_offset` adds up
those tokens' lengths.
Completions `echo: true` returns the prompt before the completion, and with `logprobs` scores the prompt's
tokens too (the first has `null`: nothing precedes it); `max_tokens: 0` with it scores without generating.
lm-eval's `local-completions` scores a multiple-choice or perplexity task so (`echo`, `logprobs: 1`, and
`max_tokens: 1`, whose token it drops: its `max_length` is the model's context, `/v1/models`' `context`,
from which it keeps one token for that one; `python -m nemotron.evaluation --through-server URL` sets it).

Continuing an answer (the page's click on an alternative token; vLLM's pair of options): chat
`continue_final_message: true` (with `add_generation_prompt` false or absent) takes a conversation that ends
with an assistant message and continues that message instead of opening a new turn. The prompt is the
conversation before it in the model's own chat format, up to its generation prompt, then the message's text
tokenized as the chat data tokenizes a message's content (as text, so a prefix the model never wrote whole
may split into other tokens than it chose). The text is what the model writes after the generation prompt:
for a reasoning model with reasoning on, it starts inside the thoughts (`thoughts\n</think>\nanswer`), and
the reply is the continuation as raw `content`, not split into reasoning and answer (the client holds the
prefix and splits the whole, as `nemotron.serve.reasoning` does). A base model continues through
/v1/completions with the prompt plus the text so far.

Refused with a 400 and a one-line OpenAI error (`{"error": {"message", "type": "invalid_request_error",
"param", "code"}}`): a body that is not a JSON object, a field of the wrong type, a setting out of its range
(temperature in [0, 2], top_p in (0, 1], max_tokens >= 1 (completions >= 0), n >= 1, top_logprobs and
logprobs in [0, 20]), `n` > 1, tools, an unknown model, a prompt that does not fit the model's context
(`context_length_exceeded`), `continue_final_message` without a final assistant message, a token id
outside the vocabulary, a chat sent to a base model, a schema xgrammar cannot compile, `echo` with `stream`.
No handler declares a pydantic body, so FastAPI's 422 never answers a completion request: every check is
ours and says which field is wrong and what it may be. `/openapi.json` describes the request bodies all the
same (`CHAT_BODY`, `COMPLETION_BODY`, documentation only); tests/test_serve_fuzz.py fuzzes the server from
it with schemathesis.
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
from nemotron.serve.models import DEFAULT_SAMPLING, ServedModel
from nemotron.serve.reasoning import ReasoningSplitter

PAGE = Path(__file__).with_name("page.html")
DEFAULT_MAX_TOKENS = 512  # when a request names none: at most this, and never past the context


def _body(properties: dict, required: list[str]) -> dict:
    """OpenAPI `requestBody` of a JSON object: published in /openapi.json (clients, the API fuzz). Documentation
    only: the handlers read the raw body and check every field themselves (the OpenAI-worded 400s)."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_STOP = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}, {"type": "null"}]}
_SAMPLING = {
    "model": {"type": "string", "description": "a served model's id (GET /v1/models); default: the first"},
    "max_tokens": {"type": ["integer", "null"]},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1}, "n": {"type": ["integer", "null"]},
    "seed": {"type": ["integer", "null"]}, "stop": _STOP, "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": "boolean"}}},
    "response_format": {"type": ["object", "null"], "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]}, "json_schema": {"type": "object"}}},
}
CHAT_BODY = _body({
    **_SAMPLING, "max_completion_tokens": {"type": ["integer", "null"]},
    "messages": {"type": "array", "minItems": 1, "items": {
        "type": "object", "required": ["role", "content"], "properties": {
        "role": {"enum": ["system", "user", "assistant"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": {
            "type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}]}}}},
    "logprobs": {"type": ["boolean", "null"]},
    "top_logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20},
    "chat_template_kwargs": {"type": ["object", "null"], "properties": {"enable_thinking": {"type": "boolean"}}},
}, ["messages"])
COMPLETION_BODY = _body({
    **_SAMPLING,
    "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0}},
                         {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "array", "items": {
                             "type": "integer", "minimum": 0}}]}}]},
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20}, "echo": {"type": ["boolean", "null"]},
}, ["prompt"])


class _Bad(Exception):
    """A client error: answered with HTTP 400 and an OpenAI-style error body naming the field (`param`)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param, self.code = param, code


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
                raise _Bad(f"{where}.content[{i}]: only text parts are supported, got {kind!r}", "messages")
        return "".join(texts)
    raise _Bad(f"{where}.content: expected a string or a list of text parts", "messages")


# ---------------------------------------------------------------------------------------------------
# request fields, checked as the OpenAI API checks them (and worded as it words them)
# ---------------------------------------------------------------------------------------------------

def _json_type(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (str, "a string"), (int, "an integer"), (float, "a decimal"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return "null"


def number(body: dict, name: str, low: float, high: float | None = None, *, integer: bool = False,
           above_low: bool = False) -> Any:
    """`body[name]` (None when absent), refused unless a number in [low, high] (`above_low`: (low, high])."""
    value = body.get(name)
    if value is None:
        return None
    kind = "integer" if integer else "decimal"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _Bad(f"Invalid type for '{name}': expected {'an integer' if integer else 'a decimal'}, "
                   f"but got {_json_type(value)} instead.", name, "invalid_type")
    if value < low or (above_low and value == low):
        raise _Bad(f"Invalid '{name}': {kind} below minimum value. Expected a value {'>' if above_low else '>='} "
                   f"{low}, but got {value} instead.", name, f"{kind}_below_min_value")
    if high is not None and value > high:
        raise _Bad(f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high}, but got {value} "
                   "instead.", name, f"{kind}_above_max_value")
    return value


def boolean(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise _Bad(f"Invalid type for '{name}': expected a boolean, but got {_json_type(value)} instead.", name,
                   "invalid_type")
    return bool(value)


MAX_LOGPROBS = 20  # top alternatives per token, for chat (OpenAI's limit) and completions (vLLM's; OpenAI: 5)


def logprobs_asked(body: dict, chat: bool) -> int | None:
    """How many alternatives per token the request asks for; None: no log-probabilities."""
    if not chat:
        return number(body, "logprobs", 0, MAX_LOGPROBS, integer=True)
    top = number(body, "top_logprobs", 0, MAX_LOGPROBS, integer=True)
    if not boolean(body, "logprobs"):
        if top is not None:
            raise _Bad("Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is "
                       "used.", "top_logprobs", "invalid_value")
        return None
    return top or 0


def continued_prefix(body: dict, messages: list[dict]) -> str | None:
    """With `continue_final_message: true`, the final assistant message's text, which the answer continues
    (None: a new assistant turn). `add_generation_prompt` may say false with it (vLLM's pair), never true."""
    if not boolean(body, "continue_final_message"):
        return None
    if body.get("add_generation_prompt") is not None and boolean(body, "add_generation_prompt"):
        raise _Bad("Invalid value for 'add_generation_prompt': continue_final_message continues the final "
                   "message, so no new turn is opened; send add_generation_prompt false or leave it out",
                   "add_generation_prompt", "invalid_value")
    if len(messages) < 2 or messages[-1]["role"] != "assistant":
        raise _Bad("Invalid 'messages': continue_final_message needs a conversation that ends with the assistant "
                   "message to continue, after at least one other message", "messages", "invalid_value")
    return messages[-1]["content"]


def prompts_of(body: dict) -> list[str | list[int]]:
    """A completion request's prompts: one string or token-id list, or a list of them."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt or not all(
            (isinstance(p, str) and p) or (isinstance(p, list) and p and all(_is_id(t) for t in p)) for p in prompt):
        raise _Bad("Invalid 'prompt': expected a non-empty string, a list of token ids, or a list of either, "
                   "none of them empty", "prompt", "invalid_value")
    return prompt


def _is_id(token: Any) -> bool:
    return isinstance(token, int) and not isinstance(token, bool)


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
            raise _Bad(f"model {name!r} is not served here; this server serves {sorted(by_name)}", "model",
                       "model_not_found")
        return by_name[name]

    def request_for(body: dict, prompt_ids: list[int], engine: Engine, chat: bool,
                    where: str) -> GenerationRequest:
        """The engine request of `prompt_ids` with the body's settings, each checked (a 400 names the field)."""
        temperature = number(body, "temperature", 0, 2)
        top_p = number(body, "top_p", 0, 1, above_low=True)
        n = number(body, "n", 1, integer=True)
        if n is not None and n > 1:
            raise _Bad("n > 1 is not supported; send one request per completion", "n", "unsupported_value")
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = number(body, name, 1 if chat else 0, integer=True)
        request_seed = number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True)  # what torch.Generator takes
        logprobs = logprobs_asked(body, chat)
        if body.get("tools"):
            raise _Bad("tools are not supported by this server", "tools", "unsupported_value")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _Bad("stop must be a string or a list of strings", "stop", "invalid_type")
        response_format = body.get("response_format") or {"type": "text"}
        kind = response_format.get("type", "text")
        schema = None
        if kind == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise _Bad("response_format.json_schema.schema must be a JSON schema object", "response_format")
        elif kind not in ("text", "json_object"):
            raise _Bad(f"response_format.type {kind!r} is not supported (text, json_object, json_schema)",
                       "response_format")
        room = engine.max_positions - len(prompt_ids)
        if room < (0 if max_tokens == 0 else 1):
            raise _Bad(f"{where} ({len(prompt_ids)} tokens) does not fit the model's context of "
                       f"{engine.max_positions} tokens; shorten the {'conversation' if chat else 'prompt'}",
                       "messages" if chat else "prompt", "context_length_exceeded")
        if max_tokens is not None and max_tokens > room:
            raise _Bad(f"{where} ({len(prompt_ids)} tokens) and {name} ({max_tokens}) exceed the model's context "
                       f"of {engine.max_positions} tokens; ask for at most {room} tokens", name,
                       "context_length_exceeded")
        return GenerationRequest(
            prompt_ids=prompt_ids, max_tokens=min(DEFAULT_MAX_TOKENS, room) if max_tokens is None else max_tokens,
            temperature=DEFAULT_SAMPLING["temperature"] if temperature is None else float(temperature),
            top_p=DEFAULT_SAMPLING["top_p"] if top_p is None else top_p,
            seed=seed + next(counter) if request_seed is None else request_seed, stop=stop, json_schema=schema,
            json_object=kind == "json_object", logprobs=logprobs,
            prompt_logprobs=not chat and logprobs is not None and boolean(body, "echo"))

    def submit(engine: Engine, requests: list[GenerationRequest]):
        """Every request's future; a refused one is a 400 and stops those already sent."""
        futures = []
        for request in requests:
            try:
                futures.append(engine.submit(request))
            except NemotronError as bad:
                for sent in requests[:len(futures)]:
                    sent.cancelled.set()
                raise _Bad(str(bad)) from None
        return futures

    @app.exception_handler(_Bad)
    async def bad_request(_: Request, exc: _Bad):
        return JSONResponse(status_code=400, content={"error": {
            "message": str(exc), "type": "invalid_request_error", "param": exc.param, "code": exc.code}})

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/health")
    async def health():
        return {"status": "ok", "models": list(by_name), "engines": {m.name: dict(e.stats) for m, e in served},
                "devices": {m.name: str(next(m.model.parameters()).device) for m, _ in served}}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [
            {"id": m.name, "object": "model", "created": created, "owned_by": "nemotron",
             "nemotron": {**m.identity, "format": m.format, "reasons": m.reasons, "sampling": m.sampling,
                          "single_turn": m.single_turn,
                          "parameters": sum(p.numel() for p in m.model.parameters()),
                          "context": e.max_positions}} for m, e in served]}

    @app.post("/v1/chat/completions", openapi_extra=CHAT_BODY)
    async def chat_completions(raw: Request):
        body = await _json(raw)
        model, engine = pick(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise _Bad("messages must be a non-empty list of {role, content} objects", "messages")
        plain = [{"role": m.get("role", "user"), "content": message_text(m.get("content"), f"messages[{i}]")}
                 for i, m in enumerate(messages)]
        kwargs = body.get("chat_template_kwargs") or {}
        thinking = kwargs.get("enable_thinking", True) if isinstance(kwargs, dict) else True
        if not isinstance(thinking, bool):
            raise _Bad("chat_template_kwargs.enable_thinking must be true or false", "chat_template_kwargs")
        prefix = continued_prefix(body, plain)
        try:
            prompt_ids = model.prompt_ids(plain[:-1] if prefix is not None else plain, enable_thinking=thinking)
        except NemotronError as bad:
            raise _Bad(str(bad), "messages") from None
        if prefix:  # the answer so far, tokenized as text after the generation prompt (as vLLM does)
            prompt_ids = prompt_ids + model.text_ids(prefix)
        request = _checked(lambda: request_for(body, prompt_ids, engine, True, "the prompt"))
        splitter = ReasoningSplitter(thinking) if model.reasons and prefix is None else None
        reply = Reply("chat.completion", model, engine, [request], [splitter])
        if body.get("stream"):
            return reply.stream(lambda: submit(engine, [request]), _include_usage(body))
        return reply.whole([await asyncio.wrap_future(f) for f in submit(engine, [request])])

    @app.post("/v1/completions", openapi_extra=COMPLETION_BODY)
    async def completions(raw: Request):
        body = await _json(raw)
        model, engine = pick(body)
        prompts = prompts_of(body)
        for i, prompt in enumerate(prompts):
            outside = [t for t in prompt if not 0 <= t < engine.vocab_size] if isinstance(prompt, list) else []
            if outside:
                raise _Bad(f"prompt {i}: token id {outside[0]} is outside the model's vocabulary "
                           f"(0..{engine.vocab_size - 1})", "prompt", "invalid_value")
        echo = boolean(body, "echo")
        if echo and body.get("stream"):
            raise _Bad("echo is not supported with stream: true; ask without streaming", "echo", "unsupported_value")
        requests = [_checked(lambda p=p, i=i: request_for(
            body, model.completion_ids(p) if isinstance(p, str) else list(p), engine, False,
            "the prompt" if len(prompts) == 1 else f"prompt {i}")) for i, p in enumerate(prompts)]
        reply = Reply("text_completion", model, engine, requests, [None] * len(requests),
                      echo=[p if isinstance(p, str) else None for p in prompts] if echo else None)
        if body.get("stream"):
            return reply.stream(lambda: submit(engine, requests), _include_usage(body))
        return reply.whole([await asyncio.wrap_future(f) for f in submit(engine, requests)])

    return app


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


def _include_usage(body: dict) -> bool:
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")) if isinstance(options, dict) else False


def _checked(build):
    """Build a request; a field of the wrong type (`"stop": 3`) is a one-line 400."""
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
