"""The standard benchmarks through a running `nemotron.serve`: lm-eval's `local-completions` model at its URL.

`python -m nemotron.evaluation --through-server URL [MODEL]` scores the same tasks, items and controls as the
in-process run (`nemotron.evaluation.benchmarks`), but every request goes over HTTP to `/v1/completions`, as
Nemotron's cookbooks evaluate a deployed model: a multiple-choice or perplexity item is the prompt echoed
with `logprobs` (the server scores it), a GSM8K item a greedy completion with `stop` strings.

What lm-eval needs besides the URL is read from the server's `GET /v1/models`:
- which model: MODEL is the served id (`/v1/models`' `id`); none needed when the server serves one model;
- its tokenizer (lm-eval cuts each request into context and continuation tokens and sends token ids): the
  served model's own, loaded from where `/v1/models` says the model was loaded from (`nemotron.path`, or
  `smollm2`), so the server must run on this machine or share its files; it is saved under the output folder;
- `max_length`: the served context (`nemotron.context`); lm-eval's API model keeps one token of it for the
  token it asks for beside the echo, so a request never exceeds the context;
- the empty context's token: EOS for our models, as in-process (`benchmarks.prefix_token_id`).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from nemotron.errors import NemotronError


def server_root(url: str) -> str:
    """`http://host:port` from what a user types: with or without `/v1`, with or without a trailing slash."""
    if not url.startswith(("http://", "https://")):
        raise NemotronError(f"--through-server {url}: not an http(s) URL; pass where python -m nemotron.serve "
                            "listens, e.g. http://127.0.0.1:8000")
    return url.rstrip("/").removesuffix("/v1")


def served_model(url: str, name: str | None) -> dict[str, Any]:
    """The `/v1/models` entry of the model `name` (the only one when `name` is None) at the server `url`. `name`
    is a served id, or a checkpoint artifact folder: the served model of the same digest."""
    import httpx

    from nemotron.artifact.locations import read_metadata

    root = server_root(url)
    try:
        response = httpx.get(f"{root}/v1/models", timeout=30)
        response.raise_for_status()
        models = response.json()["data"]
    except (httpx.HTTPError, ValueError, KeyError) as error:
        raise NemotronError(f"--through-server {url}: cannot list its models at {root}/v1/models ({error}); "
                            "start the server first: python -m nemotron.serve MODEL") from None
    ids = [m["id"] for m in models]
    if name is None and len(models) == 1:
        return models[0]
    if name is not None and (Path(name) / "metadata.json").is_file():  # a checkpoint folder: by its digest
        digest = read_metadata(Path(name)).get("digest")
        same = [m for m in models if digest and m.get("nemotron", {}).get("digest") == digest]
        if same:
            return same[0]
        raise NemotronError(f"--through-server {url} does not serve {name} (digest {str(digest)[:12]}); it serves "
                            f"{', '.join(ids)}: name one of them, or serve it: python -m nemotron.serve {name}")
    if name in ids:
        return models[ids.index(name)]
    which = "name one of them" if name is None else f"{name!r} is not served; name one of them"
    raise NemotronError(f"--through-server {url} serves {', '.join(ids)}: {which} as MODEL")


def served_tokenizer(entry: dict[str, Any]):
    """The served model's own tokenizer, from where the server loaded the model (its `/v1/models` entry)."""
    from transformers import AutoTokenizer

    from nemotron.artifact.locations import read_metadata
    from nemotron.models.reference import SMOLLM2, SMOLLM2_GGUF, smollm2_folder, smollm2_gguf

    identity = entry.get("nemotron", {})
    if identity.get("model") == SMOLLM2:  # the server's converted copy when this machine has it, else the GGUF's
        folder = smollm2_folder(convert=False)
        if folder is not None:
            return AutoTokenizer.from_pretrained(folder, local_files_only=True)
        return AutoTokenizer.from_pretrained(smollm2_gguf().parent, gguf_file=SMOLLM2_GGUF, local_files_only=True)
    path = Path(identity.get("path", ""))
    if identity.get("path") and (path / "metadata.json").is_file():
        return AutoTokenizer.from_pretrained(read_metadata(path)["model_dir"], local_files_only=True)
    if identity.get("path") and (path / "config.json").is_file():
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    raise NemotronError(f"served model {entry['id']!r}: its tokenizer is not readable here (the server says it "
                        f"loaded {identity.get('path') or identity.get('model')!r}); run this on the server's "
                        "machine, or with its run folders at the same path")


def server_lm(url: str, entry: dict[str, Any], out: Path, *, batch_size: int = 16, max_length: int | None = None):
    """lm-eval's `local-completions` model sending `entry`'s model the requests, `batch_size` prompts per call."""
    from nemotron.evaluation.benchmarks import prefix_token_id
    from nemotron.evaluation.lm_eval_offline import import_lm_eval

    tokenizer = served_tokenizer(entry)
    folder = out / "tokenizer"  # lm-eval loads a tokenizer by path: saved as a folder here
    tokenizer.save_pretrained(str(folder))
    import_lm_eval()
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    with contextlib.redirect_stdout(sys.stderr):
        return LocalCompletionsAPI(
            base_url=f"{server_root(url)}/v1/completions", model=entry["id"], tokenizer=str(folder.resolve()),
            tokenizer_backend="huggingface", tokenized_requests=True,
            max_length=max_length or entry["nemotron"]["context"], batch_size=batch_size, num_concurrent=1,
            max_retries=1, custom_prefix_token_id=prefix_token_id(tokenizer))
