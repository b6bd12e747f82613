"""Reasoning apart from the answer, while the text is still arriving.

A nano3 completion with reasoning on starts inside the thoughts (the prompt already ended in
`<think>\\n`) and reads `reasoning\\n</think>\\nanswer` (`nemotron.data_prep.chat.nano3`). Clients of
reasoning models read the two apart: the reasoning in `reasoning_content` (llama.cpp, SGLang, the
Nemotron cookbooks) and `reasoning` (vLLM), the answer in `content`, in whole messages and in stream
deltas alike. With reasoning off (`enable_thinking=False`) the prompt closed the thoughts already and
everything is answer. A completion that never writes `</think>` (cut by max_tokens) is all reasoning.

`ReasoningSplitter.feed(text)` takes the completion in pieces of any size and returns the
(reasoning, answer) pieces that are certain: a tail that may be the start of `</think>`, and the
newlines around it that the format adds, wait for the next piece. `finish()` flushes what is left.
Fed the whole text at once or in any pieces, the concatenated outputs are the same (tested on
seeded random cuts), which is what makes a streamed answer equal to a non-streamed one.
"""

from __future__ import annotations

END = "</think>"


class ReasoningSplitter:
    def __init__(self, thinking: bool = True):
        self.in_reasoning = thinking
        self._pending = ""  # text not yet handed out: a possible start of </think>, or format newlines
        self._answer_started = not thinking

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning piece, answer piece) that `text` makes certain."""
        self._pending += text
        reasoning = answer = ""
        if self.in_reasoning:
            if END in self._pending:
                before, _, after = self._pending.partition(END)
                reasoning = before.rstrip("\n")
                self.in_reasoning, self._pending = False, after
            else:
                keep = _partial_end(self._pending)
                body = self._pending[: len(self._pending) - keep]
                ready = body.rstrip("\n")  # newlines before </think> belong to the format, not the thoughts
                reasoning, self._pending = ready, self._pending[len(ready):]
                return reasoning, ""
        if not self._answer_started:  # the newline after </think> belongs to the format too
            self._pending = self._pending.lstrip("\n")
            if not self._pending:
                return reasoning, ""
            self._answer_started = True
        answer, self._pending = self._pending, ""
        return reasoning, answer

    def finish(self) -> tuple[str, str]:
        """The rest: unclosed thoughts stay reasoning (newlines included); a held answer tail is answer."""
        rest, self._pending = self._pending, ""
        if self.in_reasoning:
            return rest, ""
        return "", rest.lstrip("\n") if not self._answer_started else rest


def split(text: str, thinking: bool = True) -> tuple[str, str]:
    """(reasoning, answer) of a whole completion: the same pieces a stream gives, joined."""
    splitter = ReasoningSplitter(thinking)
    first, last = splitter.feed(text), splitter.finish()
    return first[0] + last[0], first[1] + last[1]


def _partial_end(text: str) -> int:
    """Length of the longest tail of `text` that is a proper start of `</think>`."""
    for n in range(min(len(END) - 1, len(text)), 0, -1):
        if text.endswith(END[:n]):
            return n
    return 0
