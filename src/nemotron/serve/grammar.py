"""Structured outputs: the grammar a request's `response_format` asks for, compiled once per schema.

xgrammar (the engine vLLM and SGLang use) compiles a JSON schema into a grammar
over the tokenizer's vocabulary; at every step it gives the set of tokens that keep the output a
valid prefix of some JSON document of that schema, and the logits of all other tokens are set to
-inf. So even a 135M-parameter model returns JSON that parses and validates (unless max_tokens cuts
it short: finish_reason "length"); so does an untrained one. One repair on the way (`json_schema_grammar`):
xgrammar 0.2.8 lets a string with minLength/maxLength hold raw control characters, which JSON forbids.
"""

from __future__ import annotations

import json
from typing import Any

from nemotron.errors import NemotronError


class Grammars:
    """xgrammar's compiler over one tokenizer, and the grammars it compiled, by schema (compiling costs ~0.1-1 s)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]):
        import xgrammar

        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        self.token_bytes: list[bytes] = list(info.decoded_vocab)  # each id's bytes (may be half a UTF-8 character)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._compiled: dict[str, Any] = {}

    def compile(self, json_schema: dict | None) -> Any:
        """The compiled grammar of `json_schema` (compact JSON of that schema), or of any JSON object when None;
        a schema xgrammar cannot compile is a NemotronError naming why (the caller's 400)."""
        key = "json_object" if json_schema is None else json.dumps(json_schema, sort_keys=True)
        if key not in self._compiled:
            try:
                self._compiled[key] = (self._compiler.compile_builtin_json_grammar() if json_schema is None
                                       # compact JSON: with any whitespace allowed a small model
                                       # spends its tokens on newlines and indentation
                                       else self._compiler.compile_grammar(json_schema_grammar(key)))
            except Exception as error:  # xgrammar raises RuntimeError / ValueError for unsupported schemas
                raise NemotronError("response_format json_schema cannot be compiled: "
                                    f"{str(error).splitlines()[0]}") from None
        return self._compiled[key]


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
