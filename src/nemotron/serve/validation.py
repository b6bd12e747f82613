"""A request's fields, read and checked as the OpenAI API checks them (and worded as it words them).

Every check of `nemotron.serve.app`'s two completion endpoints lives here: a field of the wrong type, a setting
out of its range, an unsupported option, a prompt that does not fit the context. Each raises `BadRequest`,
which the app answers with HTTP 400 and a one-line OpenAI error naming the field (`param`). `CHAT_BODY` and
`COMPLETION_BODY` publish the request bodies in /openapi.json (documentation only: the handlers read the raw
body and check each field here, so FastAPI's 422 never answers a completion request).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from nemotron.serve.engine import Engine, GenerationRequest

DEFAULT_MAX_TOKENS = 512  # when a request names none: at most this, and never past the context


def request_body(properties: dict, required: list[str]) -> dict:
    """OpenAPI `requestBody` of a JSON object: published in /openapi.json (clients, the API fuzz). Documentation
    only: the handlers read the raw body and check every field themselves (the OpenAI-worded 400s)."""
    schema = {"type": "object", "properties": properties, "required": required}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_STOP = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 4}, {"type": "null"}]}
_SAMPLING = {
    "model": {"type": "string",
              "description": "a served model's id (GET /v1/models); default: the first, or a run's final chat model"},
    "max_tokens": {"type": ["integer", "null"]},
    "temperature": {"type": ["number", "null"], "minimum": 0, "maximum": 2},
    "top_p": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1}, "n": {"type": ["integer", "null"]},
    "seed": {"type": ["integer", "null"]}, "stop": _STOP, "stream": {"type": ["boolean", "null"]},
    "stream_options": {"type": ["object", "null"], "properties": {"include_usage": {"type": "boolean"}}},
    "response_format": {"type": ["object", "null"], "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]}, "json_schema": {"type": "object"}}},
}
CHAT_BODY = request_body({
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
COMPLETION_BODY = request_body({
    **_SAMPLING,
    "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0}},
                         {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "array", "items": {
                             "type": "integer", "minimum": 0}}]}}]},
    "logprobs": {"type": ["integer", "null"], "minimum": 0, "maximum": 20}, "echo": {"type": ["boolean", "null"]},
}, ["prompt"])


class BadRequest(Exception):
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
                raise BadRequest(f"{where}.content[{i}]: only text parts are supported, got {kind!r}", "messages")
        return "".join(texts)
    raise BadRequest(f"{where}.content: expected a string or a list of text parts", "messages")


def json_type(value: Any) -> str:
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
        raise BadRequest(f"Invalid type for '{name}': expected {'an integer' if integer else 'a decimal'}, "
                   f"but got {json_type(value)} instead.", name, "invalid_type")
    if value < low or (above_low and value == low):
        raise BadRequest(f"Invalid '{name}': {kind} below minimum value. Expected a value {'>' if above_low else '>='} "
                   f"{low}, but got {value} instead.", name, f"{kind}_below_min_value")
    if high is not None and value > high:
        raise BadRequest(f"Invalid '{name}': {kind} above maximum value. Expected a value <= {high}, but got {value} "
                   "instead.", name, f"{kind}_above_max_value")
    return value


def boolean(body: dict, name: str) -> bool:
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(f"Invalid type for '{name}': expected a boolean, but got {json_type(value)} instead.", name,
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
            raise BadRequest("Invalid value for 'top_logprobs': 'logprobs' must be set to true when 'top_logprobs' is "
                       "used.", "top_logprobs", "invalid_value")
        return None
    return top or 0


def continued_prefix(body: dict, messages: list[dict]) -> str | None:
    """With `continue_final_message: true`, the final assistant message's text, which the answer continues
    (None: a new assistant turn). `add_generation_prompt` may say false with it (vLLM's pair), never true."""
    if not boolean(body, "continue_final_message"):
        return None
    if body.get("add_generation_prompt") is not None and boolean(body, "add_generation_prompt"):
        raise BadRequest("Invalid value for 'add_generation_prompt': continue_final_message continues the final "
                   "message, so no new turn is opened; send add_generation_prompt false or leave it out",
                   "add_generation_prompt", "invalid_value")
    if len(messages) < 2 or messages[-1]["role"] != "assistant":
        raise BadRequest("Invalid 'messages': continue_final_message needs a conversation that ends with the assistant "
                   "message to continue, after at least one other message", "messages", "invalid_value")
    return messages[-1]["content"]


def prompts_of(body: dict) -> list[str | list[int]]:
    """A completion request's prompts: one string or token-id list, or a list of them."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt or not all(
            (isinstance(p, str) and p) or (isinstance(p, list) and p and all(_is_id(t) for t in p)) for p in prompt):
        raise BadRequest("Invalid 'prompt': expected a non-empty string, a list of token ids, or a list of either, "
                   "none of them empty", "prompt", "invalid_value")
    return prompt


def _is_id(token: Any) -> bool:
    return isinstance(token, int) and not isinstance(token, bool)


def generation_request(body: dict, prompt_ids: list[int], engine: Engine, chat: bool, where: str,
                       seeds: Iterator[int], sampling: dict) -> GenerationRequest:
    """The engine request of `prompt_ids` with the body's settings, each checked (a 400 names the field).
    `where` names the prompt in messages ("the prompt", "prompt 2"); `seeds` gives the seed when none is sent;
    `sampling`: the temperature and top_p when none is sent (the model's, `ServedModel.sampling`)."""
    temperature = number(body, "temperature", 0, 2)
    top_p = number(body, "top_p", 0, 1, above_low=True)
    n = number(body, "n", 1, integer=True)
    if n is not None and n > 1:
        raise BadRequest("n > 1 is not supported; send one request per completion", "n", "unsupported_value")
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = number(body, name, 1 if chat else 0, integer=True)
    request_seed = number(body, "seed", -(1 << 63), (1 << 64) - 1, integer=True)  # what torch.Generator takes
    logprobs = logprobs_asked(body, chat)
    if body.get("tools"):
        raise BadRequest("tools are not supported by this server", "tools", "unsupported_value")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest("stop must be a string or a list of strings", "stop", "invalid_type")
    response_format = body.get("response_format") or {"type": "text"}
    kind = response_format.get("type", "text")
    schema = None
    if kind == "json_schema":
        schema = (response_format.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON schema object", "response_format")
    elif kind not in ("text", "json_object"):
        raise BadRequest(f"response_format.type {kind!r} is not supported (text, json_object, json_schema)",
                   "response_format")
    room = engine.max_positions - len(prompt_ids)
    if room < (0 if max_tokens == 0 else 1):
        raise BadRequest(f"{where} ({len(prompt_ids)} tokens) does not fit the model's context of "
                   f"{engine.max_positions} tokens; shorten the {'conversation' if chat else 'prompt'}",
                   "messages" if chat else "prompt", "context_length_exceeded")
    if max_tokens is not None and max_tokens > room:
        raise BadRequest(f"{where} ({len(prompt_ids)} tokens) and {name} ({max_tokens}) exceed the model's context "
                   f"of {engine.max_positions} tokens; ask for at most {room} tokens", name,
                   "context_length_exceeded")
    return GenerationRequest(
        prompt_ids=prompt_ids, max_tokens=min(DEFAULT_MAX_TOKENS, room) if max_tokens is None else max_tokens,
        temperature=sampling["temperature"] if temperature is None else float(temperature),
        top_p=sampling["top_p"] if top_p is None else top_p,
        seed=next(seeds) if request_seed is None else request_seed, stop=stop, json_schema=schema,
        json_object=kind == "json_object", logprobs=logprobs,
        prompt_logprobs=not chat and logprobs is not None and boolean(body, "echo"))


def include_usage(body: dict) -> bool:
    """`stream_options.include_usage`: a last streamed chunk with the usage."""
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")) if isinstance(options, dict) else False


def checked(build):
    """Build a request; a field of the wrong type (`"stop": 3`) is a one-line 400."""
    try:
        return build()
    except (TypeError, ValueError, AttributeError) as error:
        raise BadRequest(f"a field of the request has the wrong type: {str(error).splitlines()[0]}") from None


async def read_body(raw: Any) -> dict:
    """The request's body: a JSON object, or a 400."""
    try:
        body = await raw.json()
    except ValueError:
        raise BadRequest("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body
