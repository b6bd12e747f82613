"""Talk to a model the recipes made, in the terminal: streamed, in its own chat format, offline.

    python -m nemotron.chat                                          # the newest chat checkpoint under runs/
    python -m nemotron.chat runs/nano3/stage2_rl/training            # a checkpoint artifact (or an HF folder)
    python -m nemotron.chat runs/nano2/stage2_alignment/training --prompt "hello"   # answer once, exit
    echo "What is 12+30?" | python -m nemotron.chat runs/nano3/stage2_rl/training --no-reasoning

The conversation is kept turn after turn (except for a model trained on single turns, nano3: there each
message is asked alone, the chat says so at start, and `/history on` keeps the conversation) and rendered
with the checkpoint's own template (from its tokenizer, `nemotron.serve.models`); tokens are printed as the
engine decodes them (the same `nemotron.serve.engine` the server runs, so what you see here is what an
API client gets). Commands: `/reset` (forget the conversation), `/history on|off`, `/temperature T` (0 =
greedy, the default, sent explicitly as the chat page does; an API request that names none is sampled as
vLLM would, `nemotron.serve.models.default_sampling`), `/system TEXT` (a system message; `/system` alone
removes it), `/reasoning on|off` (nano3: think first, or answer at once), `/quit`. A pretrain checkpoint
never learnt to chat: each line you type is continued as plain text, with no memory of earlier lines.

The answer goes to stdout and everything else (reasoning, banners, prompts) to stderr, so
`answer=$(python -m nemotron.chat ... --prompt "...")` captures the answer alone. Colour (dim
reasoning) only on a terminal that is not `TERM=dumb` and without `NO_COLOR`; piped input is read a
line per turn.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import tyro

from nemotron.cli import run_tool
from nemotron.errors import NemotronError
from nemotron.models.device import DeviceSettings


@dataclass
class Config(DeviceSettings):  # --device (nemotron.models.device)
    """Chat with a checkpoint in the terminal. Default sampling: greedy (temperature 0, top_p 1), as on the
    server's chat page (the API's default for a request that names none is vLLM's: temperature 1). A model
    trained on single turns (nano3) is asked one turn at a time unless `--history` (or `/history on`)."""

    model: tyro.conf.Positional[str | None] = None
    """A checkpoint artifact folder, a Hugging Face model folder or `smollm2`; default: the newest chat
    checkpoint under --runs."""
    prompt: str | None = None
    """Answer this one message and exit."""
    system: str | None = None
    """A system message to start the conversation with."""
    reasoning: bool = True
    """nano3: reason before answering (the reasoning is shown apart from the answer)."""
    temperature: float = 0.0
    """0 is greedy: the same question gets the same answer (the small models the recipes make answer sense
    greedily and noise at temperature 1)."""
    history: tyro.conf.FlagCreatePairsOff[bool] = False
    """Keep the conversation turn after turn, even with a model trained on single turns (by default only the
    others keep it)."""
    no_history: tyro.conf.FlagCreatePairsOff[bool] = False
    """Ask each message alone, without the earlier ones (the default of a model trained on single turns)."""
    max_tokens: int = 256
    """Most tokens per answer (fewer if the context is nearly full)."""
    seed: int = 0
    """Seed of sampling (temperature > 0); turn i uses seed + i."""
    runs: str = "runs"
    """Where to look for the newest chat checkpoint when no model is given."""
    num_threads: int = 1
    """torch CPU threads."""


class Terminal:
    """Where text goes: the answer to stdout, the rest to stderr; dim reasoning on a colour terminal."""

    def __init__(self):
        self.colour = sys.stderr.isatty() and os.environ.get("TERM", "") != "dumb" and "NO_COLOR" not in os.environ
        self.interactive = sys.stdin.isatty()

    def note(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def reasoning(self, text: str) -> None:
        sys.stderr.write(f"\x1b[2m{text}\x1b[0m" if self.colour else text)
        sys.stderr.flush()

    def answer(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def read(self) -> str | None:
        if self.interactive:
            try:
                return input("\nyou> ")
            except EOFError:
                return None
        line = sys.stdin.readline()
        return None if not line else line.rstrip("\n")


class Chat:
    """The conversation and one call per turn: prompt ids -> engine -> streamed, split text."""

    def __init__(self, served, engine, config: Config, terminal: Terminal):
        self.served, self.engine, self.config, self.terminal = served, engine, config, terminal
        self.temperature = config.temperature
        self.system, self.reasoning = config.system, config.reasoning
        self.history = config.history or (not config.no_history and not served.single_turn)
        self.turns: list[dict] = []
        self.count = 0

    def messages(self, text: str) -> list[dict]:
        head = [{"role": "system", "content": self.system}] if self.system else []
        return head + (self.turns if self.history else []) + [{"role": "user", "content": text}]

    def ask(self, text: str) -> str:
        """Stream the model's answer to `text`; returns the answer (without the reasoning)."""
        from nemotron.serve.engine import GenerationRequest
        from nemotron.serve.reasoning import ReasoningSplitter

        chat = self.served.format != "completion"
        ids = self.served.prompt_ids(self.messages(text), self.reasoning) if chat else self.served.completion_ids(text)
        room = self.engine.max_positions - len(ids)
        if room < 1:
            raise NemotronError(f"the conversation ({len(ids)} tokens) fills the model's context of "
                                f"{self.engine.max_positions}; /reset to start again")
        thinking = chat and self.served.reasons and self.reasoning
        splitter = ReasoningSplitter(thinking)
        shown = {"reasoning": False, "answer": []}

        def show(piece: str, final: bool = False) -> None:
            reasoning, answer = splitter.feed(piece)
            if final:
                rest = splitter.finish()
                reasoning, answer = reasoning + rest[0], answer + rest[1]
            if reasoning:
                if not shown["reasoning"]:
                    self.terminal.note("[reasoning]")
                    shown["reasoning"] = True
                self.terminal.reasoning(reasoning)
            if answer:
                if shown["reasoning"] and not shown["answer"]:
                    self.terminal.note("\n[answer]")
                shown["answer"].append(answer)
                self.terminal.answer(answer)

        request = GenerationRequest(prompt_ids=ids, max_tokens=min(self.config.max_tokens, room),
                                    temperature=self.temperature, top_p=1.0,
                                    seed=self.config.seed + self.count, on_text=show)
        self.count += 1
        result = self.engine.submit(request).result()
        show("", final=True)
        self.terminal.answer("\n")
        if result.finish_reason == "length":
            self.terminal.note(f"[cut at {request.max_tokens} tokens]")
        answer = "".join(shown["answer"])
        if chat and not self.history:
            pass  # one turn at a time: nothing to keep
        elif chat and answer.strip():
            self.turns += [{"role": "user", "content": text}, {"role": "assistant", "content": answer}]
        elif chat:  # nothing to answer with (thoughts cut by max_tokens): an empty turn would not render
            self.terminal.note("[no answer, so this exchange is not kept in the conversation]")
        return answer

    def command(self, line: str) -> bool:
        """Run a /command; False for /quit."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name in ("/quit", "/exit"):
            return False
        if name == "/reset":
            self.turns = []
            self.terminal.note("[conversation forgotten]")
        elif name == "/temperature":
            try:
                self.temperature = max(0.0, float(arg))
                self.terminal.note(f"[temperature {self.temperature}]")
            except ValueError:
                self.terminal.note(f"[/temperature takes a number, e.g. /temperature 0.7; got {arg!r}]")
        elif name == "/system":
            self.system = arg or None
            self.terminal.note(f"[system message {'set' if arg else 'removed'}]")
        elif name == "/history" and arg in ("on", "off"):
            self.history = arg == "on"
            self.turns = []
            self.terminal.note("[the conversation is kept turn after turn]" if self.history
                               else "[one turn at a time: each message is asked alone]")
        elif name == "/reasoning" and arg in ("on", "off"):
            self.reasoning = arg == "on"
            note = "" if self.served.reasons else f" (this model, {self.served.format}, does not reason)"
            self.terminal.note(f"[reasoning {arg}{note}]")
        else:
            self.terminal.note("[commands: /reset, /temperature T, /system TEXT, /history on|off, /reasoning on|off, "
                               "/quit]")
        return True


def main(config: Config) -> None:
    if config.history and config.no_history:
        raise NemotronError("--history and --no-history ask for opposite things; give one of them")
    import torch

    from nemotron.models.device import pick_device
    from nemotron.serve.engine import Engine
    from nemotron.serve.models import load_served, newest_chat_checkpoint

    device = pick_device(config.device)
    torch.set_num_threads(config.num_threads)
    terminal = Terminal()
    spec = config.model or str(newest_chat_checkpoint(config.runs))
    served = load_served(spec, device=device)
    engine = Engine(served.model, served.tokenizer, max_batch_size=1, stop_token_ids=served.stop_token_ids)
    chat = Chat(served, engine, config, terminal)
    kind = "plain completion (a base model)" if served.format == "completion" else f"{served.format} chat"
    if config.prompt is not None:
        terminal.note(f"chat: {spec} ({kind})")
        chat.ask(config.prompt)
        return
    terminal.note(f"chat: {spec} ({kind}). Type a message; /reset /temperature T /system TEXT "
                  f"/history on|off /reasoning on|off /quit")
    if served.format != "completion" and not chat.history:
        terminal.note("[this model was trained on single turns: each message is asked alone, without the earlier "
                      "ones; /history on keeps the conversation]")
    while (line := terminal.read()) is not None:
        if not line.strip():
            continue
        if line.startswith("/"):
            if not chat.command(line.strip()):
                break
            continue
        try:
            chat.ask(line)
        except NemotronError as problem:  # a conversation too long, a message the template refuses
            terminal.note(f"error: {problem}")


if __name__ == "__main__":
    run_tool(main)
