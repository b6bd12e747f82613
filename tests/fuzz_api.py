"""The fuzzing half of tests/test_serve_fuzz.py, run in a fresh interpreter: `python tests/fuzz_api.py ROOT`.

hypothesis refuses to generate floats once a library built with -ffast-math has switched the process's
floating point to flush subnormals to zero, which one of the libraries the rest of the suite loads does;
a fresh interpreter holding only schemathesis and hypothesis has the IEEE defaults. Prints a JSON list of
the requests that got a 5xx (empty when none did) as its last stdout line.
"""

from __future__ import annotations

import json
import sys

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

EXAMPLES = 20  # per operation and per mode (fitting the schema / not)
PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health"}


def main(root: str) -> int:
    schema = schemathesis.openapi.from_url(f"{root}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    missing = PATHS - {op.path for op in operations}
    if missing or "requestBody" not in schema.raw_schema["paths"]["/v1/chat/completions"]["post"]:
        print(f"the schema does not describe {sorted(missing) or 'the chat request body'}", file=sys.stderr)
        return 2  # the request bodies must be described, or fuzzing never reaches them
    failures: list[str] = []

    def fuzz(operation, mode: str) -> None:
        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode)))
        def send(case):
            response = case.call(base_url=root, timeout=60)  # a hang fails here, as a timeout
            if response.status_code >= 500:
                failures.append(f"{operation.method.upper()} {operation.path} {case.body!r}: "
                                f"{response.status_code} {response.text[:200]}")

        send()

    for operation in operations:
        for mode in ("positive", "negative") if operation.method.lower() == "post" else ("positive",):
            fuzz(operation, mode)  # a GET without parameters has no invalid form
    print(json.dumps(failures))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
