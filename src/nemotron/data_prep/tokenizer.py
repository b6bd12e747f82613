"""Train and load the byte-level BPE tokenizer every nemotron model uses.

What this module does:
- `train_tokenizer(texts, vocab_size, output_dir)` learns a byte-level BPE vocabulary with the Hugging
  Face `tokenizers` library and saves it as a standard Hugging Face tokenizer folder
  (`tokenizer.json` + `tokenizer_config.json`, optional chat template) that
  `transformers.AutoTokenizer.from_pretrained(folder)` loads offline.
- `load_tokenizer(folder)` loads any such folder (ours or a downloaded one) and turns every failure into
  one `NemotronError` line naming the folder.
- `check_same_vocabulary(a, b, ...)` refuses two tokenizers that would give the same text different ids
  (a checkpoint and a dataset made with another tokenizer).

Why byte-level BPE: it is the scheme of GPT-2 (Radford et al., 2019) and of most open LMs since,
Nemotron included. Every string is first mapped to its UTF-8 bytes, each byte to a printable
character, and merges are learned over those, so there is never an unknown token and
`decode(encode(text)) == text` holds exactly for any text (no normalizer, no added prefix space).

Special tokens are reserved *before* training, in the fixed order of `SPECIAL_TOKENS`, so their ids are
0..4 in every tokenizer we train: pad=0, bos=1, eos=2 match the defaults of transformers'
`NemotronHConfig`, and the two ChatML markers used by the nano2 chat template follow. The tokenizer
adds no special tokens on its own when encoding: pretraining data prep appends EOS explicitly (see
`nemotron.data_prep.formats.bin_idx`) and chat data gets its markers from the chat template.

Determinism: BPE training is a greedy, tie-broken algorithm with no randomness, so the same texts and
vocab_size give a byte-identical `tokenizer.json` (tested).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from nemotron import atomic
from nemotron.errors import NemotronError

if TYPE_CHECKING:  # transformers takes seconds to import; data-prep worker processes never need it
    from transformers import PreTrainedTokenizerFast

# Reserved first, in this order, so that their ids are 0..4 in every tokenizer (shared contract).
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, IM_START_TOKEN, IM_END_TOKEN = SPECIAL_TOKENS
PAD_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))

# A byte-level vocabulary always contains the 256 byte symbols plus the special tokens.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)


# The tokenizer vocabulary each scale is designed for (embedding + output head are 2 * vocab * hidden
# parameters, so the vocabulary is part of a model's size). Stage 0 data curation trains its tokenizer with this;
# nemotron.models.nano2 sizes its embeddings for it.
VOCAB_SIZES = {"tiny": 4096, "small": 8192, "medium": 32768, "full": 131072}

def build_bpe_tokenizer() -> Tokenizer:
    """An untrained byte-level BPE pipeline: bytes in, bytes out, nothing normalized away."""
    tokenizer = Tokenizer(models.BPE())
    # add_prefix_space=False: GPT-2 style prefixing would change the text and break exact round trips.
    # use_regex=True splits on the GPT-2 pattern first so merges never cross word/number boundaries.
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    output_dir: Path,
    chat_template: str | None = None,
    seed: int = 0,
    min_frequency: int = 2,
) -> Path:
    """Train a byte-level BPE tokenizer on `texts` and save it as a Hugging Face folder at `output_dir`.

    `seed` is accepted so every data-prep step shares one signature; BPE training itself has no
    randomness (merges are chosen by count, ties broken by token ids), so it does not change the result.
    `min_frequency` skips merges seen fewer times, which keeps a tiny corpus from memorising one-offs.
    The folder appears atomically: it is built next to `output_dir` and renamed into place.
    Returns `output_dir`.
    """
    from transformers import PreTrainedTokenizerFast

    del seed  # documented above: training is deterministic without one
    if vocab_size < MIN_VOCAB_SIZE:
        raise NemotronError(
            f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least {MIN_VOCAB_SIZE} "
            f"(256 bytes + {len(SPECIAL_TOKENS)} special tokens); pass a larger vocab_size"
        )
    tokenizer = build_bpe_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,  # ids 0..4, before any byte or merge
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, even unseen ones
        show_progress=False,
    )
    counted = _CountingIterator(texts)
    tokenizer.train_from_iterator(counted, trainer=trainer)
    if counted.count == 0:
        raise NemotronError(
            f"no training text for the tokenizer at {output_dir}: the texts iterable was empty; "
            "pass at least one non-empty document"
        )
    _check_special_ids(tokenizer, where=str(output_dir))

    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START_TOKEN, IM_END_TOKEN],
        chat_template=chat_template,
    )
    _save_atomically(hf_tokenizer, Path(output_dir))
    return Path(output_dir)


@dataclass(frozen=True)
class TokenizerFacts:
    """What data prep needs of a tokenizer folder to tokenize shards: no transformers object."""

    backend_json: str  # the `tokenizers` pipeline; a worker rebuilds it with Tokenizer.from_str
    size: int  # len(tokenizer): the vocabulary with its added tokens (sizes the token dtype)
    eos_token_id: int | None


# The tokenizer classes that use tokenizer.json as it is; others (Llama's, GPT-2's...) may rewrite its
# normalizer or pre-tokenizer when transformers loads them, so only transformers can say what they do.
_PLAIN_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")


def tokenizer_facts(path: Path | str) -> TokenizerFacts:
    """A tokenizer folder's backend JSON, size and EOS id, read with `tokenizers` alone when the folder is
    a plain one (a plain class, every special token already in tokenizer.json, no special_tokens_map.json)
    and through `load_tokenizer` otherwise. Why: transformers imports torch, about 4 CPU seconds
    (measured), which was half the CPU time of a 12 MB pretraining data prep on one worker."""
    folder = Path(path)
    facts = _plain_facts(folder)
    if facts is not None:
        return facts
    tokenizer = load_tokenizer(folder)
    return TokenizerFacts(tokenizer.backend_tokenizer.to_str(), len(tokenizer), tokenizer.eos_token_id)


def _plain_facts(folder: Path) -> TokenizerFacts | None:
    """The facts of a plain folder, or None when transformers must decide them."""
    backend_file, config_file = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not (backend_file.is_file() and config_file.is_file()) or (folder / "special_tokens_map.json").exists():
        return None
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
        backend = Tokenizer.from_file(str(backend_file))
    except Exception:  # a malformed folder: load_tokenizer gives the one-line error
        return None
    if not isinstance(config, dict) or config.get("tokenizer_class") not in _PLAIN_CLASSES:
        return None
    special = [config.get(key) for key in ("bos_token", "eos_token", "unk_token", "pad_token")]
    special += list(config.get("extra_special_tokens") or []) + list(config.get("additional_special_tokens") or [])
    special += list((config.get("added_tokens_decoder") or {}).values())
    contents = [token.get("content") if isinstance(token, dict) else token for token in special if token is not None]
    if not all(isinstance(token, str) and backend.token_to_id(token) is not None for token in contents):
        return None  # transformers would add a token, which changes the size
    eos = config.get("eos_token")
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return TokenizerFacts(backend.to_str(), backend.get_vocab_size(with_added_tokens=True),
                          backend.token_to_id(eos) if eos is not None else None)


def load_tokenizer(path: Path | str) -> PreTrainedTokenizerFast:
    """Load a Hugging Face tokenizer folder offline; any failure is one NemotronError naming `path`."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = Path(path)
    if not folder.is_dir():
        raise NemotronError(
            f"tokenizer folder not found: {folder}; pass the folder written by train_tokenizer "
            "(it holds tokenizer.json and tokenizer_config.json)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as error:  # transformers raises many types (OSError, ValueError, JSON errors)
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise NemotronError(
            f"cannot load the tokenizer in {folder}: {first_line}; "
            "re-create it with train_tokenizer or point to a valid Hugging Face tokenizer folder"
        ) from error
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        raise NemotronError(
            f"the tokenizer in {folder} is a slow {type(tokenizer).__name__}; "
            "nemotron needs a fast tokenizer folder with a tokenizer.json"
        )
    return tokenizer


def check_same_vocabulary(
    tokenizer: PreTrainedTokenizerFast, reference: PreTrainedTokenizerFast, where: str, reference_where: str
) -> None:
    """Refuse two tokenizers that would turn the same text into different ids.

    A model only understands the ids it was trained with: fine-tuning a checkpoint on data tokenized by
    another tokenizer trains it on shuffled symbols, silently. Compared: every token and its id
    (special tokens included) and the BPE merges, which decide how text splits into those tokens.
    """
    vocab, reference_vocab = tokenizer.get_vocab(), reference.get_vocab()
    problem = None
    if vocab != reference_vocab:
        differing = sorted(set(vocab.items()) ^ set(reference_vocab.items()), key=lambda item: item[1])
        token = differing[0][0]
        problem = (
            f"the vocabularies differ ({len(vocab)} vs {len(reference_vocab)} tokens; e.g. {token!r} is id "
            f"{vocab.get(token)} vs {reference_vocab.get(token)})"
        )
    elif _bpe_model(tokenizer) != _bpe_model(reference):
        problem = "the vocabularies match but the BPE merges differ, so the same text splits differently"
    if problem:
        raise NemotronError(
            f"the tokenizer of {where} does not match the tokenizer of {reference_where}: {problem}; "
            "use the data made with this model's tokenizer (re-run data curation from this checkpoint)"
        )


def _bpe_model(tokenizer: PreTrainedTokenizerFast) -> dict:
    return json.loads(tokenizer.backend_tokenizer.to_str())["model"]


class _CountingIterator:
    """Pass texts through to the trainer while counting them, so an empty corpus is an error."""

    def __init__(self, texts: Iterable[str]) -> None:
        self._texts = iter(texts)
        self.count = 0

    def __iter__(self) -> _CountingIterator:
        return self

    def __next__(self) -> str:
        text = next(self._texts)
        self.count += 1
        return text


def _check_special_ids(tokenizer: Tokenizer, where: str) -> None:
    """The shared contract fixes special-token ids; fail loudly if the library ever changes that."""
    for expected_id, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected_id:
            raise NemotronError(
                f"special token {token!r} got id {tokenizer.token_to_id(token)} instead of "
                f"{expected_id} while training the tokenizer for {where}; check the tokenizers version"
            )


def _save_atomically(hf_tokenizer: PreTrainedTokenizerFast, output_dir: Path) -> None:
    """Save into a temp folder beside `output_dir`, then swap it in, so readers never see half a folder."""
    with atomic.output_folder(output_dir) as staging:
        hf_tokenizer.save_pretrained(str(staging))


def train_tokenizer_on_files(out: Path, train_files: list[Path], vocab_size: int,
                             chat_template: str | None = None) -> tuple[Path, bool]:
    """Train `<out>/tokenizer` on the texts of JSONL files, unless a receipt proves the same one is there.

    The texts stream from the files (the trainer counts words as they come; nothing holds the split).
    The receipt (`<out>/receipts/tokenizer.json`) records what the tokenizer was made from: the files'
    checksums, the vocabulary size, special tokens, chat template and `tokenizers` version.
    Returns (folder, re-used).
    """
    import hashlib

    import tokenizers

    from nemotron.data_prep.receipts import is_done, make_receipt, read_receipt, receipt_path, write_receipt
    from nemotron.data_prep.storage import sha256

    folder = out / "tokenizer"
    work = {
        "train_sha256": hashlib.sha256("".join(sha256(path) for path in train_files).encode()).hexdigest(),
        "vocab_size": vocab_size,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template_sha256": hashlib.sha256((chat_template or "").encode()).hexdigest(),
        "tokenizers_version": tokenizers.__version__,
    }
    run_hash = hashlib.sha256(json.dumps(work, sort_keys=True).encode()).hexdigest()
    if is_done(out, read_receipt(out, "tokenizer"), run_hash, "tokenizer", work):
        return folder, True
    receipt_path(out, "tokenizer").unlink(missing_ok=True)  # from here on, nothing vouches for the folder
    texts = (json.loads(line)["text"] for path in train_files for line in path.open(encoding="utf-8"))
    train_tokenizer(texts, vocab_size, folder, chat_template=chat_template)
    outputs = [f.relative_to(out).as_posix() for f in sorted(folder.rglob("*")) if f.is_file()]
    write_receipt(out, make_receipt(out, run_hash, "tokenizer", work, outputs, {}))
    return folder, False
