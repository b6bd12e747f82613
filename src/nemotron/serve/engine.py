"""Batched text generation over a transformers causal LM, with grammar-constrained structured output.

This is the inside of the model server (`nemotron.serve`) and of the terminal chat (`nemotron.chat`):
requests arrive one by one (from HTTP handlers, or from the chat loop) and the engine thread decodes them.

Continuous batching (the default, `batching="continuous"`): between two decode steps, waiting requests
join the running batch and finished or cancelled ones leave it, their future answered and their cache
freed at once, so a 2-token request sent beside a 200-token one is answered in about its own time
(benchmarks/bench_serve.py: 0.85 s against 14.9 s static on SmolLM2, 2 cores). Each row keeps its own
cache (attention KV, and for the hybrid models the Mamba state), is prefilled alone and decodes alone (a
batch of one per forward pass), so a greedy answer is the same bytes whatever else is in the batch. The
price: B rows cost B forward passes per step, where one padded batch costs about one on a weight-bound
CPU: with 8 clients at once, aggregate tokens/s is lower than static batching's (the same benchmark).
Stacking rows of compatible caches into one pass (vLLM's paged KV) would win it back.

Static batching (`batching="static"`, kept to measure against): waiting requests are collected for a
few milliseconds and decoded in ONE padded batch until its last row finishes; requests that arrive
meanwhile wait for the next batch. On a CPU (and even more on a GPU) a decode step is bound by reading
the weights, not by arithmetic, so B rows per forward pass cost little more than one (the Orca / vLLM
argument; `nemotron.sdg.cost.critical_batch_size` puts a number on it).

One decode loop, visible:
- prefill: the prompts, left-padded so every row's last token sits in the last column, with an
  attention mask and position ids that skip the padding;
- each step: logits of the last position -> per-row grammar mask (xgrammar, when the request asked
  for a JSON schema) -> greedy (temperature 0) or seeded sampling with temperature / top-p ->
  append, stop on EOS, a stop string, the grammar's end, or max_tokens.

Streaming: after every step each row's text so far is decoded again and the part not yet handed out
goes to the request's `on_text` callback (called on the engine thread). Text that could still become
a stop string, or that ends in half a UTF-8 character (the replacement character U+FFFD), is held
back until the next token decides it, so the concatenated deltas are exactly the final text: a
streamed answer and a non-streamed one are the same bytes. A request whose `cancelled` event is set
(a client that went away) stops at the next step, with finish_reason "cancelled" (static batching: its
batch ends as soon as its other rows do).

Structured outputs: xgrammar (the engine vLLM and SGLang use) compiles a JSON schema into a grammar
over the tokenizer's vocabulary; at every step it gives the set of tokens that keep the output a
valid prefix of some JSON document of that schema, and the logits of all other tokens are set to
-inf. So even a 135M-parameter model returns JSON that parses and validates (unless max_tokens cuts
it short: finish_reason "length"); so does an untrained one. One repair on the way (`json_schema_grammar`):
xgrammar 0.2.8 lets a string with minLength/maxLength hold raw control characters, which JSON forbids.

Log-probabilities (`request.logprobs` = k alternatives): for each completion token, its log-probability
and the k most likely tokens at that step, from the model's own distribution: the log-softmax of the raw
logits, before temperature, top-p and the grammar mask (vLLM's default, "raw logprobs"), so they equal
a plain forward pass over prompt + completion and do not change with the sampling settings.
`request.prompt_logprobs` scores the prompt itself from the prefill's logits (the first token has no
log-probability: nothing precedes it); with `max_tokens` 0 a request is scored and nothing is generated.
Streaming hands each step's new tokens to `on_logprobs` just before their text goes to `on_text`.

Determinism: temperature 0 is greedy; with temperature > 0 each row samples from its own
`torch.Generator` seeded with the request's seed, so a request's draws do not depend on the other
rows. (Static batching only: padding and batch shapes can change float rounding in the logits, so at
temperature 0 a near-tie may break differently; continuous batching runs each row alone.)
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from nemotron.errors import NemotronError

# How long the engine waits for more requests to join a batch. 8 client threads need more than 10 ms
# to all arrive; with 10 ms the first ran as a batch of one (bench_sdg_server: 1.45x at 10 ms, 3.61x at 50 ms).
COLLECT_SECONDS = 0.05
# A temperature below this is greedy: logits / 1e-40 overflow float32 to inf, and the softmax of inf is NaN
# (vLLM draws the same line, at the same value).
GREEDY_BELOW = 1e-5
BATCHING = ("continuous", "static")


@dataclass
class GenerationRequest:
    """One completion to generate. `prompt_ids` are already rendered (chat template applied)."""

    prompt_ids: list[int]
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    json_schema: dict | None = None  # response_format json_schema
    json_object: bool = False  # response_format {"type": "json_object"}: any JSON object
    logprobs: int | None = None  # per completion token its log-prob and this many alternatives; None: none
    prompt_logprobs: bool = False  # score the prompt's tokens too (with `logprobs` alternatives each)
    on_text: Callable[[str], None] | None = None  # streaming: called with each new piece of text
    on_logprobs: Callable[[list[TokenLogprob]], None] | None = None  # streaming: the tokens behind that text
    cancelled: threading.Event = field(default_factory=threading.Event)  # set it to stop this request


@dataclass(frozen=True)
class TokenLogprob:
    """One token's log-probability under the model, and the most likely tokens at its position."""

    token: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, log-prob), most likely first


@dataclass
class GenerationResult:
    text: str
    completion_ids: list[int]
    finish_reason: str  # "stop" | "length" | "cancelled"
    logprobs: list[TokenLogprob] | None = None  # one per completion id, when the request asked
    prompt_logprobs: list[TokenLogprob | None] | None = None  # one per prompt id (the first None)


@dataclass
class _Row:
    request: GenerationRequest
    future: Future
    generator: torch.Generator | None
    matcher: Any = None  # xgrammar.GrammarMatcher
    ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    released: int = 0  # entries of `logprobs` already handed to on_logprobs
    prompt_logprobs: list[TokenLogprob | None] | None = None
    text: str = ""  # the completion so far, cut at a stop string
    sent: int = 0  # characters of `text` already handed to on_text
    done: bool = False
    finish_reason: str = "length"
    past: Any = None  # continuous batching: this row's own cache (attention KV, Mamba state)
    logits: torch.Tensor | None = None  # continuous batching: the logits of its next position


class Engine:
    """Owns the model; `submit(request)` returns a Future that the engine thread completes."""

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 16, stop_token_ids: list[int] = (),
                 batching: str = "continuous"):
        """`stop_token_ids`: ids that end a completion besides EOS (a chat format's end of turn, `<|im_end|>`).
        `batching`: "continuous" (requests join and leave between decode steps) or "static" (the old way,
        kept to measure against: a batch runs until its last row finishes)."""
        import xgrammar

        if batching not in BATCHING:
            raise NemotronError(f"batching must be one of {', '.join(BATCHING)}, got {batching!r}")
        self.model, self.tokenizer, self.max_batch_size, self.batching = model, tokenizer, max_batch_size, batching
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])  # logits width (may exceed len(tokenizer))
        self.eos_ids = eos_ids(model, tokenizer, stop_token_ids)
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20)
        self._xgr = xgrammar
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=self.vocab_size,
                                                       stop_token_ids=self.eos_ids)
        self.token_bytes: list[bytes] = list(info.decoded_vocab)  # each id's bytes (may be half a UTF-8 character)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._grammars: dict[str, Any] = {}  # compiled grammars by schema text: compiling costs ~0.1-1 s
        self._queue: queue.Queue[tuple[GenerationRequest, Future]] = queue.Queue()
        self.stats = {"batches": 0, "requests": 0, "max_batch": 0, "generated_tokens": 0, "cancelled": 0,
                      "steps": 0}
        loop = self._loop if batching == "static" else self._continuous_loop
        self._thread = threading.Thread(target=loop, name="nemotron-engine", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------------------------------
    # API for the HTTP layer
    # ----------------------------------------------------------------------------------------------

    def submit(self, request: GenerationRequest) -> Future:
        if not request.prompt_ids:
            raise NemotronError("the prompt is empty; send at least one token of text")
        if len(request.prompt_ids) + request.max_tokens > self.max_positions:
            raise NemotronError(f"prompt ({len(request.prompt_ids)} tokens) + max_tokens ({request.max_tokens}) "
                                f"exceeds the model's {self.max_positions} positions; shorten the prompt or max_tokens")
        if request.max_tokens < 0:
            raise NemotronError(f"max_tokens must be at least 0, got {request.max_tokens}")
        bad = [t for t in request.prompt_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise NemotronError(f"token id {bad[0]} is outside the model's vocabulary (0..{self.vocab_size - 1})")
        if request.json_schema is not None or request.json_object:
            self.grammar(request)  # compile now, so a bad schema is the caller's 400, not an engine failure
        future: Future = Future()
        self._queue.put((request, future))
        return future

    def grammar(self, request: GenerationRequest) -> Any:
        key = "json_object" if request.json_schema is None else json.dumps(request.json_schema, sort_keys=True)
        if key not in self._grammars:
            try:
                self._grammars[key] = (self._compiler.compile_builtin_json_grammar() if request.json_schema is None
                                       # compact JSON: with any whitespace allowed a small model
                                       # spends its tokens on newlines and indentation
                                       else self._compiler.compile_grammar(json_schema_grammar(key)))
            except Exception as error:  # xgrammar raises RuntimeError / ValueError for unsupported schemas
                raise NemotronError("response_format json_schema cannot be compiled: "
                                    f"{str(error).splitlines()[0]}") from None
        return self._grammars[key]

    # ----------------------------------------------------------------------------------------------
    # the engine thread
    # ----------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            batch = [self._queue.get()]
            deadline = time.monotonic() + COLLECT_SECONDS
            while len(batch) < self.max_batch_size:  # let concurrent requests join this batch
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            try:
                self._generate([_Row(r, f, _generator(r), self._matcher(r)) for r, f in batch])
            except Exception as error:  # never let one bad batch kill the server
                for _, future in batch:
                    if not future.done():
                        future.set_exception(error)

    def _continuous_loop(self) -> None:
        """Continuous batching: between two decode steps, waiting requests join (each prefilled alone, into
        its own cache) and finished or cancelled ones leave (their future answered at once)."""
        active: list[_Row] = []
        while True:
            running = bool(active)
            waiting = []
            if not active:
                waiting.append(self._queue.get())
            while len(active) + len(waiting) < self.max_batch_size:
                try:
                    waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for request, future in waiting:
                row = None
                try:
                    row = _Row(request, future, _generator(request), self._matcher(request))
                    self.stats["requests"] += 1
                    self._prefill(row)
                    active.append(row)
                except Exception as error:  # one bad request never stops the others
                    if not future.done():
                        future.set_exception(error)
            if active:
                if not running:  # "batches" here: busy spells, from the first row joining an idle engine
                    self.stats["batches"] += 1
                self.stats["steps"] += 1
                self.stats["max_batch"] = max(self.stats["max_batch"], len(active))
            for row in list(active):
                try:
                    self._step(row)
                except Exception as error:
                    row.done = True
                    if not row.future.done():
                        row.future.set_exception(error)
                if row.done:
                    active.remove(row)
                    row.past = row.logits = None  # its place and its cache are free now
                    if not row.future.done():
                        self._finish(row)

    @torch.no_grad()
    def _prefill(self, row: _Row) -> None:
        """Run `row`'s prompt alone through the model: its cache, its next logits, its prompt's scores."""
        device = next(self.model.parameters()).device
        ids = torch.tensor([row.request.prompt_ids], dtype=torch.long, device=device)
        output = self.model(input_ids=ids, use_cache=True)
        if row.request.prompt_logprobs:
            row.prompt_logprobs = self._score_prompt(row.request, output.logits[0])
        if row.request.max_tokens == 0:  # scored only (echo with max_tokens 0)
            row.done = True
            return
        row.past, row.logits = output.past_key_values, output.logits[0, -1, :].float().cpu()

    @torch.no_grad()
    def _step(self, row: _Row) -> None:
        """One token for `row` from its pending logits, then (unless it finished) one forward pass for the next.
        A row decodes alone (batch of one), so its greedy output does not depend on the other rows."""
        if row.done:
            return
        if row.request.cancelled.is_set():  # the client went away: stop here
            row.done, row.finish_reason = True, "cancelled"
            self.stats["cancelled"] += 1
            return
        logits = row.logits
        raw = torch.log_softmax(logits, dim=-1) if row.request.logprobs is not None else None
        if row.matcher is not None:
            bitmask = self._xgr.allocate_token_bitmask(1, self.vocab_size)
            row.matcher.fill_next_token_bitmask(bitmask, 0)
            logits = logits[None].clone()
            self._xgr.apply_token_bitmask_inplace(logits, bitmask)
            logits = logits[0]
        token = self._pick(row, logits)
        if raw is not None:
            row.logprobs.append(top_logprobs(raw, token, row.request.logprobs))
        self._append(row, token)
        if row.done:
            return
        device = next(self.model.parameters()).device
        output = self.model(input_ids=torch.tensor([[token]], dtype=torch.long, device=device),
                            past_key_values=row.past, use_cache=True)
        row.past, row.logits = output.past_key_values, output.logits[0, -1, :].float().cpu()

    def _finish(self, row: _Row) -> None:
        self.stats["generated_tokens"] += len(row.ids)
        row.future.set_result(GenerationResult(
            row.text, row.ids, row.finish_reason, row.logprobs if row.request.logprobs is not None else None,
            row.prompt_logprobs))

    def _matcher(self, request: GenerationRequest) -> Any:
        if request.json_schema is None and not request.json_object:
            return None
        return self._xgr.GrammarMatcher(self.grammar(request))

    @torch.no_grad()
    def _generate(self, rows: list[_Row]) -> None:
        self.stats["batches"] += 1
        self.stats["requests"] += len(rows)
        self.stats["max_batch"] = max(self.stats["max_batch"], len(rows))
        device = next(self.model.parameters()).device
        # --- prefill: left padding puts every row's last prompt token in the last column ---
        width = max(len(row.request.prompt_ids) for row in rows)
        input_ids = torch.zeros((len(rows), width), dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            n = len(row.request.prompt_ids)
            input_ids[i, width - n:] = torch.tensor(row.request.prompt_ids)
            attention[i, width - n:] = 1
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        bitmask = self._xgr.allocate_token_bitmask(len(rows), self.vocab_size)
        for row in rows:
            if row.request.max_tokens == 0:  # scored only (echo with max_tokens 0): done after the prefill
                row.done = True
        past, step_input, step_positions = None, input_ids, positions
        for step in range(max(1, *(row.request.max_tokens for row in rows))):
            output = self.model(input_ids=step_input.to(device), attention_mask=attention.to(device),
                                position_ids=step_positions.to(device), past_key_values=past, use_cache=True)
            if step == 0:
                for i, row in enumerate(rows):
                    if row.request.prompt_logprobs:
                        prompt = output.logits[i, width - len(row.request.prompt_ids):]
                        row.prompt_logprobs = self._score_prompt(row.request, prompt)
            if all(row.done for row in rows):
                break
            past = output.past_key_values
            logits = output.logits[:, -1, :].float().cpu()
            # the model's own distribution, before the grammar mask and the sampling settings change it
            raw = torch.log_softmax(logits, dim=-1) if any(r.request.logprobs is not None for r in rows) else None
            # --- grammar: tokens that cannot continue a valid JSON document get -inf ---
            constrained = [i for i, row in enumerate(rows) if row.matcher is not None and not row.done]
            if constrained:
                for i in constrained:
                    rows[i].matcher.fill_next_token_bitmask(bitmask, i)
                self._xgr.apply_token_bitmask_inplace(logits, bitmask, indices=constrained)
            next_ids = [self._pick(row, logits[i]) for i, row in enumerate(rows)]
            for i, (row, token) in enumerate(zip(rows, next_ids, strict=True)):
                if not row.done and row.request.cancelled.is_set():  # the client went away: stop here
                    row.done, row.finish_reason = True, "cancelled"
                    self.stats["cancelled"] += 1
                elif not row.done:
                    if row.request.logprobs is not None:
                        row.logprobs.append(top_logprobs(raw[i], token, row.request.logprobs))
                    self._append(row, token)
            if all(row.done for row in rows):
                break
            # Finished rows keep decoding a token nobody reads until the batch ends (static batching).
            step_input = torch.tensor(next_ids, dtype=torch.long)[:, None]
            step_positions = step_positions[:, -1:] + 1
            attention = torch.cat([attention, torch.ones((len(rows), 1), dtype=torch.long)], dim=1)
        for row in rows:
            self._finish(row)

    def _score_prompt(self, request: GenerationRequest, logits: torch.Tensor) -> list[TokenLogprob | None]:
        """Each prompt token's log-prob from the logits of the position before it (`logits`: the prompt's rows)."""
        log_probs = torch.log_softmax(logits[:-1].float().cpu(), dim=-1)
        k = request.logprobs or 0
        return [None] + [top_logprobs(row, token, k) for row, token in zip(log_probs, request.prompt_ids[1:],
                                                                           strict=True)]

    def _pick(self, row: _Row, logits: torch.Tensor) -> int:
        if row.done:
            return self.eos_ids[0]
        if row.request.temperature < GREEDY_BELOW:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / row.request.temperature, dim=-1)
        if row.request.top_p < 1.0:  # nucleus: keep the smallest set of tokens whose mass reaches top_p
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < row.request.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs, 1, generator=row.generator))

    def _append(self, row: _Row, token: int) -> None:
        row.ids.append(token)
        if row.matcher is not None and not row.matcher.accept_token(token):
            row.done, row.finish_reason = True, "stop"  # cannot happen after masking; stop rather than emit junk
        elif token in self.eos_ids or (row.matcher is not None and row.matcher.is_terminated()):
            row.done, row.finish_reason = True, "stop"
        elif len(row.ids) >= row.request.max_tokens:
            row.done, row.finish_reason = True, "length"
        text_ids = row.ids[:-1] if row.ids[-1] in self.eos_ids else row.ids
        row.text = self.tokenizer.decode(text_ids, skip_special_tokens=True)
        stops = [s for s in row.request.stop if s]
        found = [row.text.index(s) for s in stops if s in row.text]
        if found:  # a stop string ends the completion and is cut off, as OpenAI does
            row.text, row.done, row.finish_reason = row.text[: min(found)], True, "stop"
        ready = len(row.text) if row.done else _safe_end(row.text, stops)
        if ready > row.sent:
            if row.request.on_logprobs is not None and row.released < len(row.logprobs):
                row.request.on_logprobs(row.logprobs[row.released:])
                row.released = len(row.logprobs)
            if row.request.on_text is not None:
                row.request.on_text(row.text[row.sent:ready])
            row.sent = ready


def top_logprobs(log_probs: torch.Tensor, token: int, k: int) -> TokenLogprob:
    """`token`'s entry of one position's log-softmax (`log_probs`, float32) and its `k` largest entries."""
    values, ids = torch.topk(log_probs, k) if k else (torch.empty(0), torch.empty(0, dtype=torch.long))
    return TokenLogprob(token, float(log_probs[token]), list(zip(ids.tolist(), values.tolist(), strict=True)))


def _safe_end(text: str, stops: list[str]) -> int:
    """How much of `text` can be handed out now: not a trailing half character (U+FFFD, the next token
    completes it) nor a trailing piece that may still grow into a stop string."""
    end = len(text.rstrip("\ufffd"))
    for stop in stops:
        for n in range(min(len(stop) - 1, end), 0, -1):
            if text[end - n:end] == stop[:n]:
                end -= n
                break
    return end


def json_schema_grammar(schema: str) -> Any:
    r"""xgrammar's grammar of compact JSON (no optional whitespace) matching `schema`, with no raw control
    character in any string.

    xgrammar 0.2.8 writes each character of a string with minLength/maxLength (every string the SDG client
    caps) as `[^\"\\\r\n]`, which admits raw U+0000-U+001F (a tab, \x0e) that JSON forbids, so a strict
    parser (`json.loads`, Data Designer) rejects the answer (mlc-ai/xgrammar#800). That class is narrowed to
    `[^\0-\x1f\"\\\r\n]`, what xgrammar already allows in an unbounded string. A trained model rarely writes
    a control character there; an untrained one does within a few tokens.
    """
    import xgrammar

    text = str(xgrammar.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=True))
    return xgrammar.Grammar.from_ebnf(text.replace(_BOUNDED_STRING_CHAR, _JSON_STRING_CHAR))


_BOUNDED_STRING_CHAR, _JSON_STRING_CHAR = r'[^\"\\\r\n]', r'[^\0-\x1f\"\\\r\n]'  # as xgrammar prints them


def _generator(request: GenerationRequest) -> torch.Generator | None:
    if request.temperature < GREEDY_BELOW:
        return None
    generator = torch.Generator()
    generator.manual_seed(request.seed)
    return generator


def eos_ids(model: Any, tokenizer: Any, stop_token_ids: Sequence[int] = ()) -> list[int]:
    """Every id that ends a completion: the generation config's EOS (one or a list), the tokenizer's, then
    `stop_token_ids` (a chat format's end of turn), each once, in that order."""
    found: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in ([config_eos] if isinstance(config_eos, int) else list(config_eos or [])) + [tokenizer.eos_token_id]:
        if value is not None and int(value) not in found:
            found.append(int(value))
    if not found:
        raise NemotronError("the model has no EOS token (generation_config.eos_token_id / tokenizer.eos_token_id); "
                            "set one in its config")
    return found + [int(t) for t in stop_token_ids if int(t) not in found]
