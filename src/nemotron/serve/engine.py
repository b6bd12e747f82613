"""Batched text generation over a transformers causal LM, with grammar-constrained structured output.

This is the inside of the model server (`nemotron.serve`) and of the terminal chat (`nemotron.chat`):
requests arrive one by one (from HTTP handlers, or from the chat loop) and the engine thread decodes them.

Continuous batching, in one forward pass per step: between two decode steps, waiting requests join the
running batch and finished or cancelled ones leave it, their future answered and their cache freed at once,
so a 2-token request sent beside a 200-token one is answered in about its own time. Every running row is
decoded by ONE forward pass per step: on a CPU (and more so on a GPU) a decode step is bound by reading the
weights, not by arithmetic, so B rows per pass cost little more than one (the Orca / vLLM argument;
`nemotron.sdg.cost.critical_batch_size` puts a number on it). benchmarks/bench_serve.py measures it.

One decode loop, visible (`_loop`):
1. join: waiting requests (an idle engine waits JOIN_WINDOW_S for those sent together) are prefilled in one
   pass, left-padded to the longest prompt (the padding masked: attention skips it, the Mamba layers zero it,
   each row at its own positions), and their caches join the running batch's (`nemotron.serve.stacked`: Mamba
   states stacked, attention keys and values left-padded to the longest row, in buffers with room for the
   tokens still to come); a request that scores its prompt (`prompt_logprobs`) is prefilled alone;
2. step: the rows' pending logits -> per-row grammar mask (xgrammar, when the request asked for a JSON
   schema) -> greedy (temperature 0) or seeded sampling with temperature / top-p -> append, stop on EOS,
   a stop string, the grammar's end, or max_tokens;
3. leave: finished rows are answered and their cache rows dropped;
4. one forward pass over every remaining row's newest token gives each its next logits.

The same answer whatever else is running: a row is prefilled and decoded beside other rows, padded and
masked, which changes nothing but float rounding (matrix products of another shape sum in another order,
~1e-6 on the log-probs); prompt scores are exact (their prompt is prefilled alone).
So a greedy completion is the same tokens alone or in any batch unless two tokens' logits come within that
rounding of each other; tests/test_serve_batching.py checks it for nano2, nano3 and SmolLM2 (tokens equal,
log-probs within 1e-4, joining mid-stream included) and names the token and the gap if a near-tie ever flips.

Streaming: after every step each row's text so far is decoded again and the part not yet handed out
goes to the request's `on_text` callback (called on the engine thread). Text that could still become
a stop string, or that ends in half a UTF-8 character (the replacement character U+FFFD), is held
back until the next token decides it, so the concatenated deltas are exactly the final text: a
streamed answer and a non-streamed one are the same bytes. A request whose `cancelled` event is set
(a client that went away) stops at the next step, with finish_reason "cancelled".

Structured outputs (a JSON schema, or any JSON object): `nemotron.serve.grammar` compiles the request's
grammar (xgrammar), and at each step the tokens that cannot continue a valid document get -inf.

Log-probabilities (`request.logprobs` = k alternatives): for each completion token, its log-probability
and the k most likely tokens at that step, from the model's own distribution: the log-softmax of the raw
logits, before temperature, top-p and the grammar mask (vLLM's default, "raw logprobs"), so they equal
a plain forward pass over prompt + completion and do not change with the sampling settings.
`request.prompt_logprobs` scores the prompt itself from the prefill's logits (the first token has no
log-probability: nothing precedes it); with `max_tokens` 0 a request is scored and nothing is generated.
Streaming hands each step's new tokens to `on_logprobs` just before their text goes to `on_text`.

Determinism: temperature 0 is greedy; with temperature > 0 each row samples from its own
`torch.Generator` seeded with the request's seed, so a request's draws do not depend on the other rows.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from nemotron.errors import NemotronError
from nemotron.serve.grammar import Grammars
from nemotron.serve.layout import column_major_linears, packed_linears
from nemotron.serve.stacked import StackedCache, free_memory, row_cost

# A temperature below this is greedy: logits / 1e-40 overflow float32 to inf, and the softmax of inf is NaN
# (vLLM draws the same line, at the same value).
GREEDY_BELOW = 1e-5
# An idle engine waits this long after a request for the next before it prefills: 8 streaming clients started
# together (bench_serve.py) reached the SmolLM2 server 0-13 ms apart, 24-33 ms first to last, and without the wait
# the first was prefilled and decoded alone while the rest queued. A lone request pays it once (its prefill: ~150 ms).
JOIN_WINDOW_S = 0.015


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
    error: Exception | None = None  # what failed it (answered as the future's exception)
    logits: torch.Tensor | None = None  # the logits of its next position, until the step picks from them


class Engine:
    """Owns the model; `submit(request)` returns a Future that the engine thread completes."""

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 16, stop_token_ids: list[int] = (),
                 cache_memory: int | None = None):
        """`stop_token_ids`: ids that end a completion besides EOS (a chat format's end of turn, `<|im_end|>`).
        `max_batch_size`: most requests decoded together; more wait until a row leaves. `cache_memory`: bytes
        the batch's caches may take (default: `stacked.free_memory`); a request that could not fit is refused.
        On a CPU the model's Linear weights are laid out column-major, in place (`layout.column_major_linears`),
        and also packed for oneDNN, used by steps of 5-16 rows (`layout.packed_linears`: one more copy of them):
        the same values to float rounding, faster batched steps."""
        import xgrammar

        self.model, self.tokenizer, self.max_batch_size = model, tokenizer, max_batch_size
        column_major_linears(model)
        packed_linears(model)
        self.device = next(model.parameters()).device
        with torch.no_grad():  # one token's cache: what a row costs, fixed and per token
            cache = model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=self.device),
                          use_cache=True).past_key_values
        self.row_bytes, self.token_bytes_per_row = row_cost(cache)
        self.cache_memory = free_memory(self.device) if cache_memory is None else cache_memory
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])  # logits width (may exceed len(tokenizer))
        self.eos_ids = eos_ids(model, tokenizer, stop_token_ids)
        self.max_positions = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20)
        self._xgr = xgrammar
        self.grammars = Grammars(tokenizer, self.vocab_size, self.eos_ids)
        self.token_bytes = self.grammars.token_bytes  # each id's bytes (may be half a UTF-8 character)
        self._queue: queue.Queue[tuple[GenerationRequest, Future]] = queue.Queue()
        self.stats = {"batches": 0, "requests": 0, "max_batch": 0, "generated_tokens": 0, "cancelled": 0,
                      "steps": 0, "prefills": 0}
        self._thread = threading.Thread(target=self._loop, name="nemotron-engine", daemon=True)
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
        self.check_fits(len(request.prompt_ids) + request.max_tokens)
        if request.json_schema is not None or request.json_object:
            self.grammars.compile(request.json_schema)  # now: a bad schema is the caller's 400, not an engine failure
        future: Future = Future()
        self._queue.put((request, future))
        return future

    def batch_bytes(self, tokens: int) -> int:
        """Cache bytes of a full batch whose longest row holds `tokens`: every row is padded to it."""
        return self.max_batch_size * (self.row_bytes + tokens * self.token_bytes_per_row)

    def check_fits(self, tokens: int) -> None:
        """Refuse, before it runs, a request of `tokens` (prompt + max_tokens) whose batch's cache could not fit."""
        need = self.batch_bytes(tokens)
        if self.cache_memory is not None and need > self.cache_memory:
            row = self.row_bytes + tokens * self.token_bytes_per_row
            raise NemotronError(f"prompt + max_tokens ({tokens} tokens) needs {row / 2**20:.1f} MiB of cache per row, "
                                f"{need / 2**20:.0f} MiB for a batch of {self.max_batch_size} rows padded to it, more "
                                f"than the {self.cache_memory / 2**20:.0f} MiB this server has for caches; ask for "
                                "fewer tokens, or serve with a smaller --max-batch-size")

    # ----------------------------------------------------------------------------------------------
    # the engine thread
    # ----------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        """The decode loop: join (prefill alone, stack) -> one step over every row -> leave (unstack)."""
        rows: list[_Row] = []
        stacked = StackedCache()
        while True:
            # 1. join: waiting requests (blocking only while idle), prefilled, their caches stacked
            joining = [_Row(request, future, None) for request, future in
                       self._waiting(block=not rows, room=self.max_batch_size - len(rows))]
            for group in _prefill_groups(joining):
                try:
                    cache = self._prefill(group)
                except Exception as error:  # a failed prefill fails its own group, never the running rows
                    for row in group:
                        row.done, row.error = True, error
                for row in group:
                    if row.done:
                        self._answer(row)
                if group[0].done:
                    continue
                if not rows:  # "batches": busy spells, from the first row joining an idle engine
                    self.stats["batches"] += 1
                rows += group
                # room: the most tokens a running row may still add (each gets max_tokens - 1 more forward passes)
                stacked.add(cache, [len(row.request.prompt_ids) for row in group],
                            room=max(row.request.max_tokens - len(row.ids) for row in rows))
            if not rows:
                continue
            self.stats["steps"] += 1
            self.stats["max_batch"] = max(self.stats["max_batch"], len(rows))
            # 2. one token per row from its pending logits: grammar mask, sampling, stops
            self._choose(rows)
            # 3. leave: finished rows are answered and their cache rows dropped
            kept = [i for i, row in enumerate(rows) if not row.done]
            for row in rows:
                if row.done:
                    self._answer(row)
            rows = [rows[i] for i in kept]
            stacked.keep(kept)
            # 4. one forward pass over every running row's newest token
            if rows:
                try:
                    self._forward(rows, stacked)
                except Exception as error:  # the batch's shared state is gone: fail its rows, start afresh
                    for row in rows:
                        row.done, row.error = True, error
                        self._answer(row)
                    rows, stacked = [], StackedCache()

    def _waiting(self, block: bool, room: int) -> list[tuple[GenerationRequest, Future]]:
        """Waiting requests, at most `room`. While idle (`block`): the first, then each that follows the one before
        within JOIN_WINDOW_S, so clients sent together join one prefill instead of the first decoding alone while
        the rest queue behind its prefill."""
        waiting = [self._queue.get()] if block else []
        while len(waiting) < room:
            try:
                waiting.append(self._queue.get(timeout=JOIN_WINDOW_S) if block else self._queue.get_nowait())
            except queue.Empty:
                break
        return waiting

    @torch.no_grad()
    def _prefill(self, group: list[_Row]) -> Any:
        """Run the prompts of `group` through the model in one pass, left-padded to the longest (padding masked,
        each row at its own positions); returns their cache (None for prompts scored only, `max_tokens` 0)."""
        self.stats["requests"] += len(group)
        self.stats["prefills"] += 1
        for row in group:
            row.generator, row.matcher = _generator(row.request), self._matcher(row.request)
        lengths = [len(row.request.prompt_ids) for row in group]
        width = max(lengths)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for i, row in enumerate(group):
            ids[i, width - lengths[i]:], mask[i, width - lengths[i]:] = torch.tensor(row.request.prompt_ids), 1
        scored = any(row.request.prompt_logprobs for row in group)  # every position's logits; else the last's
        output = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                            position_ids=(mask.cumsum(-1) - 1).clamp(min=0).to(self.device), use_cache=True,
                            logits_to_keep=0 if scored else 1)
        for i, row in enumerate(group):
            if row.request.prompt_logprobs:
                row.prompt_logprobs = self._score_prompt(row.request, output.logits[i, width - lengths[i]:])
            row.logits = output.logits[i, -1, :].float().cpu()
            row.done = row.request.max_tokens == 0  # scored only (echo with max_tokens 0)
        return None if group[0].done else output.past_key_values

    def _choose(self, rows: list[_Row]) -> None:
        """Each row's next token from its pending logits; a row whose client went away stops here."""
        logits = torch.stack([row.logits for row in rows])
        # the model's own distribution, before the grammar mask and the sampling settings change it
        raw = torch.log_softmax(logits, dim=-1) if any(r.request.logprobs is not None for r in rows) else None
        constrained = [i for i, row in enumerate(rows) if row.matcher is not None]
        if constrained:  # tokens that cannot continue a valid JSON document get -inf
            bitmask = self._xgr.allocate_token_bitmask(len(rows), self.vocab_size)
            for i in constrained:
                rows[i].matcher.fill_next_token_bitmask(bitmask, i)
            self._xgr.apply_token_bitmask_inplace(logits, bitmask, indices=constrained)
        for i, row in enumerate(rows):
            row.logits = None
            if row.request.cancelled.is_set():
                row.done, row.finish_reason = True, "cancelled"
                self.stats["cancelled"] += 1
                continue
            try:
                token = self._pick(row, logits[i])
                if raw is not None and row.request.logprobs is not None:
                    row.logprobs.append(top_logprobs(raw[i], token, row.request.logprobs))
                self._append(row, token)
            except Exception as error:  # a failing callback (a client's stream) ends its own row only
                row.done, row.error = True, error

    @torch.no_grad()
    def _forward(self, rows: list[_Row], stacked: StackedCache) -> None:
        """One decode step of every row: its newest token, at its own position, over its own cache rows."""
        mask, positions = stacked.step_inputs(self.device)
        tokens = torch.tensor([[row.ids[-1]] for row in rows], dtype=torch.long, device=self.device)
        output = self.model(input_ids=tokens, attention_mask=mask, position_ids=positions,
                            past_key_values=stacked.cache, use_cache=True)
        stacked.cache = output.past_key_values
        stacked.advance()
        logits = output.logits[:, -1, :].float().cpu()
        for i, row in enumerate(rows):
            row.logits = logits[i]

    def _answer(self, row: _Row) -> None:
        if row.future.done():
            return
        if row.error is not None:
            row.future.set_exception(row.error)
            return
        self.stats["generated_tokens"] += len(row.ids)
        row.future.set_result(GenerationResult(
            row.text, row.ids, row.finish_reason, row.logprobs if row.request.logprobs is not None else None,
            row.prompt_logprobs))

    def _matcher(self, request: GenerationRequest) -> Any:
        if request.json_schema is None and not request.json_object:
            return None
        return self._xgr.GrammarMatcher(self.grammars.compile(request.json_schema))

    def _score_prompt(self, request: GenerationRequest, logits: torch.Tensor) -> list[TokenLogprob | None]:
        """Each prompt token's log-prob from the logits of the position before it (`logits`: the prompt's rows)."""
        log_probs = torch.log_softmax(logits[:-1].float().cpu(), dim=-1)
        k = request.logprobs or 0
        return [None] + [top_logprobs(row, token, k) for row, token in zip(log_probs, request.prompt_ids[1:],
                                                                           strict=True)]

    def _pick(self, row: _Row, logits: torch.Tensor) -> int:
        if row.request.temperature < GREEDY_BELOW:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / row.request.temperature, dim=-1)
        if row.request.top_p < 1.0:  # nucleus: keep the smallest set of tokens whose mass reaches top_p
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = sorted_probs.cumsum(-1) - sorted_probs < row.request.top_p
            keep[0] = True  # the likeliest token always (a top_p below float32's smallest number keeps none else)
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


def _prefill_groups(rows: list[_Row]) -> list[list[_Row]]:
    """`rows` in groups that prefill in one pass: a request that scores its prompt alone (its prompt's scores are
    then those of a plain forward pass, exactly); prompts scored only (max_tokens 0, no cache kept) apart from
    the others, which prefill together."""
    alone = [[row] for row in rows if row.request.prompt_logprobs]
    rest = [row for row in rows if not row.request.prompt_logprobs]
    together = [[row for row in rest if row.request.max_tokens == 0], [row for row in rest if row.request.max_tokens]]
    return alone + [group for group in together if group]
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
