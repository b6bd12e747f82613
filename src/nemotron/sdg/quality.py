"""Quality of rephrased data: perplexity under a reference LM, and the side-by-side table per strategy.

Perplexity of a text under a reference LM is exp(mean next-token NLL): low means fluent, predictable
text the reference model has seen the like of. Nemotron-CC uses it the other way round too (a
rephrase should not be much less likely than clean prose). We score each original (cut to the same
number of characters the rephraser saw) and each rephrase with the same model, the reference loader
the post-training scorer uses (`models.reference`) and the batched log-probabilities of
`training.logprobs`; texts longer than `max_tokens` are cut.

`strategy_table(rows)` is what to look at: per strategy, mean perplexity of originals and rephrases,
mean judge scores, and the output/input token ratio (completion tokens / prompt tokens, from the
server's usage).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from nemotron.sdg.judge import CRITERIA


def perplexities(texts: list[str], model_spec: str, *, max_tokens: int = 256, batch_size: int = 4) -> list[float]:
    """exp(mean NLL per token) of every text under the reference model (texts of < 2 tokens: NaN)."""
    from nemotron.models.reference import load_reference_model
    from nemotron.training.logprobs import evaluation_mode, next_token_logprobs

    model, tokenizer = load_reference_model(model_spec)
    ids = [tokenizer(text, add_special_tokens=False)["input_ids"][:max_tokens] for text in texts]
    scorable = [i for i, seq in enumerate(ids) if len(seq) >= 2]
    result = [math.nan] * len(texts)
    with evaluation_mode(model):
        for i, logprobs in zip(scorable, next_token_logprobs(model, [ids[i] for i in scorable], batch_size=batch_size)):
            result[i] = math.exp(-float(logprobs.mean()))
    return result


def strategy_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    """{strategy: {records, ppl_original, ppl_rephrased, judge_<criterion>, output_input_token_ratio}}."""
    table: dict[str, dict] = {}
    for strategy in sorted({row["strategy"] for row in rows}):
        mine = [row for row in rows if row["strategy"] == strategy]
        entry: dict[str, Any] = {"records": len(mine),
                                 "ppl_original": _mean(row.get("ppl_original") for row in mine),
                                 "ppl_rephrased": _mean(row.get("ppl_rephrased") for row in mine)}
        for name in CRITERIA:
            entry[f"judge_{name}"] = _mean(row.get(f"judge_{name}") for row in mine)
        prompt = sum(row["prompt_tokens"] for row in mine)
        entry["output_input_token_ratio"] = sum(row["completion_tokens"] for row in mine) / prompt if prompt else None
        table[strategy] = entry
    return table


def _mean(values) -> float | None:
    kept = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.fmean(kept) if kept else None


def format_table(table: dict[str, dict]) -> str:
    columns = ["records", "ppl_original", "ppl_rephrased", *(f"judge_{c}" for c in CRITERIA),
               "output_input_token_ratio"]
    short = {"output_input_token_ratio": "out/in", "judge_information_density": "judge_density"}
    header = f"{'strategy':<20}" + "".join(f" {short.get(c, c):>16}" for c in columns)
    lines = [header, "-" * len(header)]
    for strategy, entry in table.items():
        cells = "".join(f" {'-' if entry[c] is None else format(entry[c], '.3g'):>16}" for c in columns)
        lines.append(f"{strategy:<20}{cells}")
    return "\n".join(lines)
