"""The HTTP side of the model server: OpenAI-compatible endpoints over one `Engine` per served model.

- `GET  /`                     the chat page (`page.html`, one static file: no build step, no CDN)
- `GET  /v1/models`            the served models, each with what it is (`nemotron`: artifact, digest, format)
- `POST /v1/chat/completions`  messages (content a string or a list of `{"type": "text"}` parts) rendered
                               in the checkpoint's own chat format (`nemotron.serve.models`)
- `POST /v1/completions`       raw prompts: a string, a list of token ids, or a list of either (one choice
                               per prompt, in order, its `index` the prompt's); base models serve only this
- `GET  /health`               200 once loaded, with each engine's batch counters and each model's device
- `POST /v1/trace`             not OpenAI's: the spans of a text found word for word in a served checkpoint's
                               training data, with their sources (`nemotron.serve.where_from`; the page's
                               "where from")

Both completion endpoints take `stream: true`: server-sent events, one `data: {chunk}` line per piece
of text and `data: [DONE]` at the end, the format the `openai` client libraries parse;
`stream_options: {"include_usage": true}` adds a last chunk with empty `choices` and the `usage`.
Every answer counts `usage` (prompt, completion, total tokens) and says why it ended: `finish_reason`
"stop" (end of turn, EOS, a `stop` string, the grammar's end) or "length" (`max_tokens`, by default
what the context leaves, at most 512). A reasoning model (nano3) returns its reasoning apart from the
answer, as `reasoning_content` and `reasoning` (the two names clients read), in messages and in
deltas; `chat_template_kwargs: {"enable_thinking": false}` switches it off per request. `response_format`
`json_schema` / `json_object` constrains decoding with xgrammar; `temperature` 0 is greedy; a request that
names no `temperature` / `top_p` is sampled as vLLM would: with the model's generation_config.json, else
temperature 1 and top_p 1 (`serve.models.default_sampling`; /v1/models shows it as `sampling`, with `from`
saying which; the chat page and the terminal chat send greedy explicitly); `seed` seeds sampling. A client
that disconnects mid-stream stops its generation.

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
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse

from nemotron.errors import NemotronError
from nemotron.serve import validation, where_from
from nemotron.serve.engine import Engine, GenerationRequest
from nemotron.serve.models import ServedModel
from nemotron.serve.reasoning import ReasoningSplitter
from nemotron.serve.reply import Reply
from nemotron.serve.validation import BadRequest

PAGE = Path(__file__).with_name("page.html")


class ServedModels:
    """The served models, each with its engine, by the name clients ask for; and the seeds of requests that
    send none (request i gets seed + i)."""

    def __init__(self, served: list[tuple[ServedModel, Engine]], seed: int = 0):
        self.served, self.by_name = served, {model.name: (model, engine) for model, engine in served}
        self.created, self.seeds = int(time.time()), itertools.count(seed)

    def pick(self, body: dict) -> tuple[ServedModel, Engine]:
        """The model the request names, or the default: the first served, unless that is a base model and chat
        models are served too (`serve runs/nano2`: stage 0 first), then the last of them (the run's final one)."""
        name = body.get("model")
        if name is None:
            chat = [pair for pair in self.served if pair[0].format != "completion"]
            return chat[-1] if self.served[0][0].format == "completion" and chat else self.served[0]
        if not isinstance(name, str):  # a list or an object is unhashable: a 400, not a 500
            raise BadRequest(f"Invalid type for 'model': expected a string, but got {validation.json_type(name)} "
                             "instead.", "model", "invalid_type")
        if name not in self.by_name:
            raise BadRequest(f"model {name!r} is not served here; this server serves {sorted(self.by_name)}",
                             "model", "model_not_found")
        return self.by_name[name]

    def request(self, body: dict, model: ServedModel, prompt_ids: list[int], engine: Engine, chat: bool,
                where: str) -> GenerationRequest:
        return validation.checked(lambda: validation.generation_request(body, prompt_ids, engine, chat, where,
                                                                        self.seeds, model.sampling))

    def health(self) -> dict:
        return {"status": "ok", "models": list(self.by_name),
                "engines": {m.name: dict(e.stats) for m, e in self.served},
                "devices": {m.name: str(next(m.model.parameters()).device) for m, _ in self.served}}

    def listing(self) -> dict:
        return {"object": "list", "data": [
            {"id": m.name, "object": "model", "created": self.created, "owned_by": "nemotron",
             "nemotron": {**m.identity, "format": m.format, "reasons": m.reasons, "sampling": m.sampling,
                          "single_turn": m.single_turn,
                          "parameters": sum(p.numel() for p in m.model.parameters()),
                          "context": e.max_positions,
                          "cache": {"max_batch_size": e.max_batch_size, "bytes_per_row": e.row_bytes,
                                    "bytes_per_token": e.token_bytes_per_row, "memory": e.cache_memory}}}
            for m, e in self.served]}


def create_app(served: list[tuple[ServedModel, Engine]], seed: int = 0) -> FastAPI:
    """The FastAPI app: HTTP <-> engine requests. Handlers await the engines' futures."""
    app = FastAPI(title="nemotron.serve")
    models = ServedModels(served, seed)

    @app.exception_handler(BadRequest)
    async def bad_request(_: Request, exc: BadRequest):
        return JSONResponse(status_code=400, content={"error": {
            "message": str(exc), "type": "invalid_request_error", "param": exc.param, "code": exc.code}})

    @app.get("/", response_class=HTMLResponse)
    async def page():
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/health")
    async def health():
        return models.health()

    @app.get("/v1/models")
    async def listing():
        return models.listing()

    @app.post("/v1/chat/completions", openapi_extra=validation.CHAT_BODY)
    async def chat_completions(raw: Request):
        return await chat(await validation.read_body(raw), models)

    @app.post("/v1/completions", openapi_extra=validation.COMPLETION_BODY)
    async def completions(raw: Request):
        return await complete(await validation.read_body(raw), models)

    @app.post("/v1/trace", openapi_extra=where_from.TRACE_BODY)
    async def trace(raw: Request):
        return await where_from.where_from(await validation.read_body(raw), models)

    return app


async def chat(body: dict, models: ServedModels):
    """/v1/chat/completions: the messages in the model's chat format, one choice, whole or streamed."""
    model, engine = models.pick(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise BadRequest("messages must be a non-empty list of {role, content} objects", "messages")
    plain = [{"role": m.get("role", "user"),
              "content": validation.message_text(m.get("content"), f"messages[{i}]")} for i, m in enumerate(messages)]
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = kwargs.get("enable_thinking", True) if isinstance(kwargs, dict) else True
    if not isinstance(thinking, bool):
        raise BadRequest("chat_template_kwargs.enable_thinking must be true or false", "chat_template_kwargs")
    prefix = validation.continued_prefix(body, plain)
    try:
        prompt_ids = model.prompt_ids(plain[:-1] if prefix is not None else plain, enable_thinking=thinking)
    except NemotronError as bad:
        raise BadRequest(str(bad), "messages") from None
    if prefix:  # the answer so far, tokenized as text after the generation prompt (as vLLM does)
        prompt_ids = prompt_ids + model.text_ids(prefix)
    request = models.request(body, model, prompt_ids, engine, True, "the prompt")
    splitter = ReasoningSplitter(thinking) if model.reasons and prefix is None else None
    reply = Reply("chat.completion", model, engine, [request], [splitter])
    if body.get("stream"):
        return reply.stream(lambda: submit_all(engine, [request]), validation.include_usage(body))
    return reply.whole([await asyncio.wrap_future(f) for f in submit_all(engine, [request])])


async def complete(body: dict, models: ServedModels):
    """/v1/completions: raw prompts (text or token ids), a choice per prompt, whole or streamed."""
    model, engine = models.pick(body)
    prompts = validation.prompts_of(body)
    for i, prompt in enumerate(prompts):
        outside = [t for t in prompt if not 0 <= t < engine.vocab_size] if isinstance(prompt, list) else []
        if outside:
            raise BadRequest(f"prompt {i}: token id {outside[0]} is outside the model's vocabulary "
                             f"(0..{engine.vocab_size - 1})", "prompt", "invalid_value")
    echo = validation.boolean(body, "echo")
    if echo and body.get("stream"):
        raise BadRequest("echo is not supported with stream: true; ask without streaming", "echo",
                         "unsupported_value")
    requests = [models.request(body, model, model.completion_ids(p) if isinstance(p, str) else list(p), engine,
                               False, "the prompt" if len(prompts) == 1 else f"prompt {i}")
                for i, p in enumerate(prompts)]
    reply = Reply("text_completion", model, engine, requests, [None] * len(requests),
                  echo=[p if isinstance(p, str) else None for p in prompts] if echo else None)
    if body.get("stream"):
        return reply.stream(lambda: submit_all(engine, requests), validation.include_usage(body))
    return reply.whole([await asyncio.wrap_future(f) for f in submit_all(engine, requests)])


def submit_all(engine: Engine, requests: list[GenerationRequest]):
    """Every request's future; a refused one is a 400 and stops those already sent."""
    futures = []
    for request in requests:
        try:
            futures.append(engine.submit(request))
        except NemotronError as bad:
            for sent in requests[:len(futures)]:
                sent.cancelled.set()
            raise BadRequest(str(bad)) from None
    return futures
