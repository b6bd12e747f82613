"""Rephrasing strategies: Jinja prompt templates over seed columns, each writing its own output column.

Nemotron-CC (Su et al. 2024, section 3) rephrased web documents with an instruct model into five
forms, and BeyondWeb (2025) confirmed that such rephrased data beats raw web text token for token.
Our five, each a template whose variables are seed columns (`text`, `title`, ...):

| strategy             | asks the model for                                                   | output      |
|----------------------|----------------------------------------------------------------------|-------------|
| `wikipedia_rephrase` | the passage rewritten in clear, encyclopedic (Wikipedia-style) prose | text        |
| `diverse_qa`         | at least three question-answer pairs of mixed types                  | `DiverseQA` |
| `distill`            | a concise version that keeps every key point                         | text        |
| `extract_knowledge`  | the knowledge in the passage, as a textbook-like passage             | text        |
| `knowledge_list`     | the facts of the passage as a bulleted list                          | text        |

`diverse_qa` is structured: the request carries the JSON schema of `DiverseQA` (3 to 6 `QAPair`s:
question, answer, question_type yes_no / open_ended / multiple_choice, and choices (2-5) exactly when
multiple choice),
the server decodes under that grammar, and the client validates the answer with the same pydantic
model. `format_output` turns it into training text ("Question: ... Answer: ...").

`check_columns` finds every variable a template uses (jinja2.meta) and refuses, before any request,
a template that names a column the seed data lacks. `load_template_dir(folder)` adds your own text
strategies: every `<name>.jinja` in the folder becomes strategy `<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jinja2
import jinja2.meta
from pydantic import BaseModel, Field

from nemotron.errors import NemotronError

MAX_FIELD_CHARS = 300  # bounds each question / answer: a tiny model otherwise rambles until max_tokens


class _QA(BaseModel):
    question: str = Field(min_length=1, max_length=MAX_FIELD_CHARS)
    answer: str = Field(min_length=1, max_length=MAX_FIELD_CHARS)


class YesNoQA(_QA):
    question_type: Literal["yes_no"]


class OpenEndedQA(_QA):
    question_type: Literal["open_ended"]


class MultipleChoiceQA(_QA):
    question_type: Literal["multiple_choice"]
    choices: list[Annotated[str, Field(min_length=1, max_length=MAX_FIELD_CHARS)]] = Field(min_length=2, max_length=5)


# One question-answer pair, its type the discriminator. A union rather than one class with an optional
# `choices` and a validator: then "choices when multiple choice" is part of the JSON schema itself, so
# the grammar enforces it while decoding instead of the client rejecting the answer afterwards.
QAPair = Annotated[YesNoQA | OpenEndedQA | MultipleChoiceQA, Field(discriminator="question_type")]


class DiverseQA(BaseModel):
    pairs: list[QAPair] = Field(min_length=3, max_length=6)


@dataclass(frozen=True)
class Strategy:
    name: str
    template: str  # Jinja, over seed columns
    schema: type[BaseModel] | None = None  # structured output, validated; None = free text
    system: str = "You rewrite documents into high-quality training text. Answer with the rewritten text only."


BUILTIN: dict[str, Strategy] = {s.name: s for s in [
    Strategy("wikipedia_rephrase",
             "Rewrite the following passage from \"{{ title }}\" as a paragraph of clear, neutral, encyclopedic "
             "English, in the style of a Wikipedia article. Keep every fact; do not add any.\n\n"
             "Passage:\n{{ text }}"),
    Strategy("diverse_qa",
             "Read the passage from \"{{ title }}\" and write at least three different question-answer pairs about it: "
             "mix yes/no, open-ended and multiple-choice questions (give the choices of a multiple-choice question). "
             "Answers must follow from the passage.\n\nPassage:\n{{ text }}",
             schema=DiverseQA,
             system="You write question-answer pairs about documents. Answer in the requested JSON format."),
    Strategy("distill",
             "Rewrite the following passage concisely: keep every key point and name, drop repetition and filler.\n\n"
             "Passage:\n{{ text }}"),
    Strategy("extract_knowledge",
             "Extract the knowledge in the following passage and write it as a short passage of a textbook: "
             "what happens, who is involved, and why it matters. Leave out anything that carries no information.\n\n"
             "Passage:\n{{ text }}"),
    Strategy("knowledge_list",
             "List the facts stated in the following passage as a bulleted list, one fact per line, each line "
             "understandable on its own.\n\nPassage:\n{{ text }}"),
]}

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def load_template_dir(folder: Path) -> dict[str, Strategy]:
    """Your own free-text strategies: `<name>.jinja` -> strategy `<name>` (overrides a built-in of that name)."""
    if not folder.is_dir():
        raise NemotronError(f"template folder {folder} does not exist; pass a folder of <name>.jinja files")
    found = {p.stem: Strategy(p.stem, p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.jinja"))}
    if not found:
        raise NemotronError(f"no *.jinja templates in {folder}")
    return found


def select(names: list[str] | tuple[str, ...], extra: dict[str, Strategy] | None = None) -> list[Strategy]:
    """The named strategies, or one error line listing the known names."""
    known = {**BUILTIN, **(extra or {})}
    if not names:
        raise NemotronError(f"no strategies given; choose from {sorted(known)}")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise NemotronError(f"unknown strategy {unknown[0]!r}; choose from {sorted(known)}")
    if len(set(names)) != len(names):
        raise NemotronError(f"strategy list {list(names)} names one twice")
    return [known[n] for n in names]


def columns_of(strategy: Strategy) -> set[str]:
    try:
        return jinja2.meta.find_undeclared_variables(_ENV.parse(strategy.template))
    except jinja2.TemplateSyntaxError as error:
        raise NemotronError(f"strategy {strategy.name}: template line {error.lineno}: {error.message}") from None


def check_columns(strategies: list[Strategy], records: list[dict[str, Any]], where: str) -> None:
    """Refuse a template that names a column some seed record lacks, before any request is sent."""
    for strategy in strategies:
        for record in records:
            missing = sorted(columns_of(strategy) - set(record))
            if missing:
                raise NemotronError(f"strategy {strategy.name}: its template uses column {missing[0]!r}, which seed "
                                    f"record {record.get('id')!r} of {where} lacks (columns: {sorted(record)}); "
                                    "fix the template or the seed data")


def render(strategy: Strategy, record: dict[str, Any], max_chars: int | None) -> list[dict]:
    """The chat messages of one request; the seed text is cut to `max_chars` (prompt length and cost; None: whole)."""
    columns = {**record, "text": record["text"][:max_chars]}
    return [{"role": "system", "content": strategy.system},
            {"role": "user", "content": _ENV.from_string(strategy.template).render(**columns)}]


def format_output(strategy: Strategy, text: str, parsed: dict | None) -> str:
    """Training text from a model answer: free text as it is (trimmed), structured QA as Question/Answer blocks."""
    if strategy.schema is DiverseQA and parsed is not None:
        return format_qa(DiverseQA.model_validate(parsed))
    return text.strip()


def format_qa(qa: DiverseQA) -> str:
    blocks = []
    for pair in qa.pairs:
        lines = [f"Question: {pair.question.strip()}"]
        for letter, choice in zip("ABCDE", getattr(pair, "choices", [])):
            lines.append(f"{letter}) {choice.strip()}")
        lines.append(f"Answer: {pair.answer.strip()}")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
