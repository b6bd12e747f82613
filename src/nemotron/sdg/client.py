"""The client side of SDG: one OpenAI-compatible endpoint, checked, retried, bounded, resumable.

The same code talks to our local server (`nemotron.serve`), vLLM, SGLang, NIM or a hosted API:
only `Endpoint.url`, `model` and `api_key_env` change.

- `Endpoint`: provider and model configuration (URL, served model id, alias recorded in lineage,
  API key read from an environment variable, max tokens, temperature, timeout, retries, bounded
  concurrency `max_parallel_requests`).
- `Client.check()`: before a run, `GET /v1/models` (is it up, does it serve this model?) and one tiny
  test request, so a wrong URL or model name fails in one line before any work.
- `Client.chat(...)`: chat completions through the official `openai` package. Transport failures
  (connection refused, timeouts, 429, 5xx) are retried with exponential backoff; after the last try
  an `EndpointDown` names the URL. A structured request sends `response_format` with the pydantic
  model's JSON schema and validates the answer with that model; an invalid answer is asked again
  (sampling, since a greedy retry would return the same bytes) and raises `InvalidOutput` when it
  stays invalid.
- `run_jobs(...)`: many requests with at most `max_parallel_requests` in flight; every finished
  record is appended (and flushed) to a JSONL file as it arrives, so an interrupted run resumes by
  skipping the keys already there; records that stay invalid are counted and listed, never dropped
  silently.
- `measure_throughput(...)`: requests/s and tokens/s of the same request sent sequentially or
  concurrently, from the `usage` the server reports.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import tyro
from pydantic import BaseModel, ValidationError

from nemotron.errors import NemotronError

RETRY_TEMPERATURE = 0.7  # an invalid structured answer is asked again with sampling, not greedily


def json_object(text: Annotated[str, tyro.conf.arg(name="")]) -> dict[str, Any]:
    """`--endpoint.extra-body '{"chat_template_kwargs": {"enable_thinking": false}}'` -> the dict."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise NemotronError(f"--extra-body: not JSON ({error.msg} at character {error.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise NemotronError(f"--extra-body: expected a JSON object of request fields, got {text!r}")
    return value


@dataclass
class Endpoint:
    """An OpenAI-compatible endpoint and the model behind it."""

    url: str = "http://127.0.0.1:8000/v1"
    """Base URL of the API (ends in /v1): the local server, vLLM, SGLang, NIM or a hosted provider."""
    model: str = "smollm2-135m-instruct"
    """The served model id, as `GET /v1/models` lists it."""
    alias: str = "rephraser"
    """Our name for this model configuration, recorded with every record and in lineage."""
    api_key_env: str | None = None
    """Environment variable holding the API key; None for a local server that needs none."""
    max_tokens: int = 256
    """Most completion tokens per request."""
    temperature: float = 0.0
    """Sampling temperature; 0 is greedy (deterministic on our server)."""
    timeout: float = 300.0
    """Seconds one request may take before it counts as failed (and is retried)."""
    max_retries: int = 3
    """Retries after a transport failure (connection, timeout, 429, 5xx), with exponential backoff."""
    retry_backoff: float = 1.0
    """Seconds before the first retry; doubled for each further one."""
    max_parallel_requests: int = 4
    """Requests in flight at once (the server batches them)."""
    invalid_retries: int = 2
    """Extra attempts for a structured answer that does not validate against its schema."""
    extra_body: Annotated[dict[str, Any], tyro.conf.arg(constructor=json_object)] = field(default_factory=dict)
    """Extra fields sent with every request, e.g. `{"chat_template_kwargs": {"enable_thinking": false}}` so a
    reasoning model (nano3, Nemotron 3 served by vLLM) answers at once in `content`."""


class EndpointDown(NemotronError):
    """The endpoint could not be reached after every retry."""


class InvalidOutput(Exception):
    """A structured answer that stayed invalid after every attempt (the record counts as failed)."""


@dataclass
class Reply:
    text: str
    parsed: dict | None
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    attempts: int
    logprobs: list[dict] | None = None  # asked with top_logprobs: per token {token, logprob, bytes, top_logprobs}


def resolve_api_key(endpoint: Endpoint) -> str:
    if endpoint.api_key_env is None:
        return "not-needed"  # the openai package insists on some key; a local server ignores it
    key = os.environ.get(endpoint.api_key_env)
    if not key:
        raise NemotronError(f"the API key variable {endpoint.api_key_env} is not set; "
                            f"export {endpoint.api_key_env}=... "
                            f"for {endpoint.url}, or pass --api-key-env None for a server that needs no key")
    return key


class Client:
    def __init__(self, endpoint: Endpoint):
        import openai

        if endpoint.max_parallel_requests < 1 or endpoint.max_retries < 0 or endpoint.max_tokens < 1:
            raise NemotronError(f"endpoint {endpoint.alias}: max_parallel_requests and max_tokens must be >= 1 "
                                f"and max_retries >= 0 (got {endpoint.max_parallel_requests}, {endpoint.max_tokens}, "
                                f"{endpoint.max_retries})")
        self.endpoint = endpoint
        self._openai = openai
        # max_retries=0: retries are ours, so they are counted and the last error names the URL.
        self._client = openai.OpenAI(base_url=endpoint.url, api_key=resolve_api_key(endpoint),
                                     timeout=endpoint.timeout, max_retries=0)

    # ----------------------------------------------------------------------------------------------
    # before a run
    # ----------------------------------------------------------------------------------------------

    def check(self) -> dict:
        """`GET /v1/models` and one tiny test request; returns the model's entry (with any extra fields)."""
        models = self._with_retries(lambda: self._client.models.list(), "GET /models")
        served = {m.id: m for m in models.data}
        if self.endpoint.model not in served:
            raise NemotronError(f"{self.endpoint.url} does not serve model {self.endpoint.model!r} "
                                f"(it serves {sorted(served)}); pass one of those as the model")
        self.chat([{"role": "user", "content": "Say OK."}], max_tokens=1)
        return served[self.endpoint.model].model_dump()

    # ----------------------------------------------------------------------------------------------
    # one request
    # ----------------------------------------------------------------------------------------------

    def chat(self, messages: list[dict], *, schema: type[BaseModel] | None = None,
             max_tokens: int | None = None, seed: int = 0, max_field_chars: int | None = None,
             max_list_items: int | None = None, top_logprobs: int | None = None) -> Reply:
        """One chat completion; with `schema`, validated (and asked again while invalid).

        `max_field_chars` caps every string of the schema sent to the server (the grammar then closes
        a string at that length) and `max_list_items` every list: the budget that keeps a small model's
        JSON inside max_tokens. `top_logprobs` (0-20) asks for each answer token's log-probability and that
        many alternatives, kept in `Reply.logprobs` (the OpenAI `logprobs.content` entries, as dicts).
        """
        attempts, problems = 0, []
        for attempt in range(1 + (self.endpoint.invalid_retries if schema else 0)):
            temperature = self.endpoint.temperature
            if attempt > 0:
                temperature = max(temperature, RETRY_TEMPERATURE)
            kwargs: dict[str, Any] = dict(model=self.endpoint.model, messages=messages, temperature=temperature,
                                          max_tokens=max_tokens or self.endpoint.max_tokens, seed=seed + attempt)
            if self.endpoint.extra_body:
                kwargs["extra_body"] = dict(self.endpoint.extra_body)
            if top_logprobs is not None:
                kwargs.update(logprobs=True, top_logprobs=top_logprobs)
            if schema is not None:
                kwargs["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": schema.__name__,
                    "schema": cap_strings(schema.model_json_schema(), max_field_chars, max_list_items),
                    "strict": True}}
            create = functools.partial(self._client.chat.completions.create, **kwargs)
            response = self._with_retries(create, "POST /chat/completions")
            attempts += 1
            choice = response.choices[0]
            text = choice.message.content or ""
            usage = response.usage
            reply = Reply(text, None, usage.prompt_tokens if usage else 0, usage.completion_tokens if usage else 0,
                          choice.finish_reason or "", attempts)
            if top_logprobs is not None and choice.logprobs is not None:
                reply.logprobs = [entry.model_dump() for entry in choice.logprobs.content or []]
            if schema is None:
                return reply
            try:
                reply.parsed = schema.model_validate_json(text).model_dump(mode="json")
                return reply
            except ValidationError as invalid:
                first = invalid.errors()[0]
                problems.append(f"{first['type']} at {'.'.join(map(str, first['loc'])) or 'top level'} "
                                f"(finish_reason {reply.finish_reason}, {len(text)} chars ending {text[-30:]!r})")
        raise InvalidOutput(f"{schema.__name__}: invalid after {attempts} attempts: {'; '.join(problems)}")

    def _with_retries(self, call, what: str):
        errors = self._openai
        transient = (errors.APIConnectionError, errors.APITimeoutError, errors.RateLimitError,
                     errors.InternalServerError)
        for attempt in range(self.endpoint.max_retries + 1):
            try:
                return call()
            except transient as error:
                last = error
                if attempt < self.endpoint.max_retries:
                    time.sleep(self.endpoint.retry_backoff * 2 ** attempt)
            except errors.AuthenticationError:
                raise NemotronError(f"{self.endpoint.url} refused the API key (401) from "
                                    f"{self.endpoint.api_key_env}; check the key") from None
            except errors.APIStatusError as error:  # 4xx: asking again will not help
                raise NemotronError(f"{what} at {self.endpoint.url} failed with {error.status_code}: "
                                    f"{_error_message(error)}") from None
        reason = str(last).splitlines()[0] if str(last) else type(last).__name__
        raise EndpointDown(f"cannot reach {self.endpoint.url} ({what}: {reason}) after {self.endpoint.max_retries + 1} "
                           f"attempts; start the server (python -m nemotron.serve) or fix the endpoint URL")


def cap_strings(schema: Any, max_chars: int | None, max_items: int | None = None) -> Any:
    """A copy of a JSON schema in which every string has maxLength <= max_chars and every array
    maxItems <= max(max_items, its minItems) (None: that bound unchanged). A string whose values are
    listed (`const`, `enum`) is left as it is: a cap shorter than its value (`"multiple_choice"`, 15
    characters) would make the schema refuse every answer that picks it."""
    if isinstance(schema, list):
        return [cap_strings(item, max_chars, max_items) for item in schema]
    if not isinstance(schema, dict):
        return schema
    capped = {key: cap_strings(value, max_chars, max_items) for key, value in schema.items()}
    if capped.get("type") == "string" and max_chars is not None and not {"const", "enum"} & capped.keys():
        capped["maxLength"] = min(capped.get("maxLength", max_chars), max_chars)
    if capped.get("type") == "array" and max_items is not None:
        bound = max(max_items, capped.get("minItems", 0))
        capped["maxItems"] = min(capped.get("maxItems", bound), bound)
    return capped


def _error_message(error: Any) -> str:
    body = getattr(error, "body", None)
    inner = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(inner, dict) and "message" in inner:
        return str(inner["message"])
    return str(error).splitlines()[0]


# --------------------------------------------------------------------------------------------------
# many requests
# --------------------------------------------------------------------------------------------------

@dataclass
class Job:
    """One request of a run: `key` is unique and names the record (e.g. "<doc id>/<strategy>")."""

    key: str
    messages: list[dict]
    schema: type[BaseModel] | None = None
    max_tokens: int | None = None
    max_field_chars: int | None = None
    max_list_items: int | None = None
    meta: dict = field(default_factory=dict)


@dataclass
class JobsRun:
    records: dict[str, dict]  # key -> record, every record in the file (old and new)
    requested: int  # jobs sent in this run (the rest were already in the file)
    failed: dict[str, str]  # key -> why it failed (structured output that stayed invalid)


def read_records(path: Path) -> dict[str, dict]:
    """The records of a JSONL run file; a torn last line (a crash mid-write) is cut off."""
    records: dict[str, dict] = {}
    if not path.exists():
        return records
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if not line.endswith(b"\n"):
            break
        records[record["key"]] = record
        good += len(line)
    if good < len(data):
        with open(path, "r+b") as handle:
            handle.truncate(good)
    return records


def run_jobs(client: Client, jobs: list[Job], path: Path, *, desc: str = "requests") -> JobsRun:
    """Send the jobs whose key is not yet in `path`, at most `max_parallel_requests` at once.

    Each finished record is appended to `path` at once (and flushed): a crash loses only requests in
    flight. A transport failure that outlasts the retries stops the run with `EndpointDown` (what is
    written stays written; re-run to resume); a structured answer that stays invalid is counted in
    `failed` and asked again on the next run.
    """
    from nemotron.progress import progress_bar

    keys = [job.key for job in jobs]
    if len(set(keys)) != len(keys):
        raise NemotronError(f"{desc}: job keys are not unique; each record needs its own key")
    path.parent.mkdir(parents=True, exist_ok=True)
    records = read_records(path)
    todo = [job for job in jobs if job.key not in records]
    failed: dict[str, str] = {}
    if len(todo) < len(jobs):
        print(f"sdg: {desc}: {len(jobs) - len(todo)} of {len(jobs)} already in {path.name}, resuming", file=sys.stderr)
    pending: dict[Future, Job] = {}
    queue = iter(todo)
    with ThreadPoolExecutor(client.endpoint.max_parallel_requests) as pool, open(path, "a", encoding="utf-8") as out, \
            progress_bar(total=len(todo), desc=f"sdg {desc}", disable=not todo) as bar:
        def refill() -> None:
            while len(pending) < client.endpoint.max_parallel_requests and (job := next(queue, None)) is not None:
                pending[pool.submit(client.chat, job.messages, schema=job.schema, max_tokens=job.max_tokens,
                                     max_field_chars=job.max_field_chars, max_list_items=job.max_list_items)] = job

        refill()
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    job = pending.pop(future)
                    try:
                        reply = future.result()
                    except InvalidOutput as invalid:
                        failed[job.key] = str(invalid)
                    else:
                        record = {"key": job.key, **job.meta, "text": reply.text, "parsed": reply.parsed,
                                  "prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                                  "finish_reason": reply.finish_reason, "attempts": reply.attempts}
                        out.write(json.dumps(record, sort_keys=True) + "\n")
                        out.flush()
                        records[job.key] = record
                    bar.update(1)
                refill()
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    if failed:
        print(f"sdg: {desc}: {len(failed)} record(s) failed validation and were not written "
              f"(re-run to ask again): {next(iter(failed.values()))}", file=sys.stderr)
    return JobsRun(records, len(todo), failed)


# --------------------------------------------------------------------------------------------------
# throughput
# --------------------------------------------------------------------------------------------------

def measure_throughput(client: Client, messages: list[dict], *, requests: int, concurrency: int,
                       max_tokens: int) -> dict[str, float]:
    """Send the same request `requests` times, `concurrency` at a time: requests/s and tokens/s.

    Different seeds per request; `max_tokens` bounds each completion. Prompt and completion tokens come
    from the server's `usage`. Decode tokens/s = completion tokens / wall seconds.
    """
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        replies = list(pool.map(lambda i: client.chat(messages, max_tokens=max_tokens, seed=i), range(requests)))
    seconds = time.perf_counter() - started
    prompt = sum(r.prompt_tokens for r in replies)
    completion = sum(r.completion_tokens for r in replies)
    return {"requests": requests, "concurrency": concurrency, "seconds": round(seconds, 3),
            "requests_per_second": requests / seconds, "prompt_tokens": prompt, "completion_tokens": completion,
            "decode_tokens_per_second": completion / seconds,
            "total_tokens_per_second": (prompt + completion) / seconds}
