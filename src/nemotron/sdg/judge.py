"""LLM-as-judge: score a rephrase against its original with a rubric, as structured output.

The judge sees the original passage and the rephrased text and returns `JudgeScores`: coherence,
faithfulness and information density, each 1 to 5 with a one-sentence reason (G-Eval, Liu et al.
2023, and the rubric-in-the-prompt practice of Data Designer's LLM judge columns). The schema goes to
the server as `response_format`, so the scores always parse; the client validates them with the same
model. A judge this small (135M on a CPU) is a demonstration of the mechanism, not a verdict: point
`--judge-endpoint` at a strong model for real numbers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

RUBRIC = {
    "coherence": "1 = fragments or nonsense; 3 = readable with lapses; 5 = fluent, well organized prose",
    "faithfulness": ("1 = contradicts or invents facts; 3 = mostly faithful with errors; "
                     "5 = every claim is in the original"),
    "information_density": "1 = empty or repetitive; 3 = some substance; 5 = dense with the original's information",
}
CRITERIA = tuple(RUBRIC)
REASON_CHARS = 200


class Score(BaseModel):
    reason: str = Field(min_length=1, max_length=REASON_CHARS)
    score: int = Field(ge=1, le=5)


class JudgeScores(BaseModel):
    coherence: Score
    faithfulness: Score
    information_density: Score


SYSTEM = "You are a strict data-quality judge. Answer in the requested JSON format."


def judge_messages(original: str, rephrased: str, max_chars: int | None) -> list[dict]:
    rubric = "\n".join(f"- {name}: {scale}" for name, scale in RUBRIC.items())
    prompt = (f"Score the REWRITE of the ORIGINAL on each criterion from 1 to 5, with a short reason first.\n"
              f"{rubric}\n\nORIGINAL:\n{original[:max_chars]}\n\nREWRITE:\n{rephrased[:max_chars]}")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]


def flat_scores(parsed: dict[str, Any] | None) -> dict[str, Any]:
    """`judge_<criterion>` (int) and `judge_<criterion>_reason` columns; None when the judge failed."""
    columns: dict[str, Any] = {}
    for name in CRITERIA:
        entry = (parsed or {}).get(name) or {}
        columns[f"judge_{name}"] = entry.get("score")
        columns[f"judge_{name}_reason"] = entry.get("reason")
    return columns
