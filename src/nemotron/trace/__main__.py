"""python -m nemotron.trace MODEL "text": the spans of the text that the model's training data holds word for word.

    python -m nemotron.trace runs/nano2/stage2_alignment/training "I am not yet."
    python -m nemotron.trace runs/nano2/stage0_pretrain/training "To be, or not to be" --min-tokens 4

MODEL is a checkpoint artifact (the folder a training step wrote) or the model folder inside one.
stdout: `{"trace": {"model", "text", "min_tokens", "datasets", "spans": [...]}}` (each span: token and character
range, text, occurrences, sources: dataset, document, position, context); stderr: the spans, readable.
Exit 2 with one `error:` line on bad input. See `nemotron.trace` for how, and what it costs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from nemotron.cli import one_line_errors
from nemotron.trace import DEFAULT_MAX_SOURCES, DEFAULT_MIN_TOKENS, Tracer


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m nemotron.trace", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path,
                        help="checkpoint artifact folder (e.g. runs/nano2/stage2_alignment/training)")
    parser.add_argument("text", help="the text to trace (e.g. an answer the model gave)")
    parser.add_argument("--min-tokens", type=int, default=None,
                        help=f"shortest span reported (default {DEFAULT_MIN_TOKENS}; for a text shorter than that, "
                             "all its tokens but one, as the report card marks a short copied answer)")
    parser.add_argument("--max-sources", type=int, default=DEFAULT_MAX_SOURCES, help="occurrences named per span")
    parser.add_argument("--index-dir", type=Path, default=None,
                        help="where indexes live (default $NEMOTRON_TRACE_INDEX_DIR, else .trace-index/ beside "
                             "each dataset)")
    args = parser.parse_args(argv)
    with one_line_errors():
        result, spans = Tracer(args.model, args.index_dir).trace(args.text, args.min_tokens, args.max_sources)
    for span in spans:
        print(f"{span.describe()}: {span.text!r} ({span.occurrences} occurrences)", file=sys.stderr)
        for source in span.sources:
            print(f"    {source.dataset} {source.document} at token {source.position}: {source.context!r}",
                  file=sys.stderr)
    if not spans:
        print(f"trace: no span of {result['min_tokens']}+ tokens of the text is in the training data", file=sys.stderr)
    print(json.dumps({"trace": result}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
