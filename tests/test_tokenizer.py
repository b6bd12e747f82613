"""The byte-level BPE tokenizer: exact round trips, fixed special ids, determinism, clear errors."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from nemotron.data_prep.tokenizer import (
    EOS_ID,
    SPECIAL_TOKENS,
    load_tokenizer,
    tokenizer_facts,
    train_tokenizer,
)
from nemotron.errors import NemotronError

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

CORPUS = [
    "To be, or not to be, that is the question:",
    "Whether 'tis nobler in the mind to suffer",
    "The slings and arrows of outrageous fortune,",
    "Or to take arms against a sea of troubles",
    "And by opposing end them. To die: to sleep;",
] * 20


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    return train_tokenizer(CORPUS, 400, tmp_path_factory.mktemp("tok") / "tokenizer", CHAT_TEMPLATE)


def test_special_tokens_have_reserved_ids_and_roles(tokenizer_dir):
    tokenizer = load_tokenizer(tokenizer_dir)
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3, 4]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, EOS_ID)
    # A ChatML marker inside text is one token, never split into bytes.
    assert tokenizer.encode("<|im_start|>user", add_special_tokens=True)[0] == 3


@pytest.mark.parametrize(
    "text",
    [
        "To be, or not to be",
        "  leading and trailing spaces  \n\n\ttabs",
        "unicode: naïve café, 日本語, emoji 🎭🎉, combining e\u0301",
        "<|im_start|>user\nhi<|im_end|>\n</s><pad>",
        "",
    ],
)
def test_decode_of_encode_is_exact(tokenizer_dir, text):
    tokenizer = load_tokenizer(tokenizer_dir)
    ids = tokenizer.encode(text, add_special_tokens=True)
    assert tokenizer.decode(ids) == text
    # Nothing is added behind the caller's back: EOS is appended explicitly by data prep.
    assert EOS_ID not in ids or "</s>" in text


@pytest.mark.slow
def test_training_is_byte_identical_across_processes(tokenizer_dir, tmp_path):
    # A fresh interpreter has fresh hash seeds, which is where nondeterminism would show up.
    script = (
        "from pathlib import Path; from nemotron.data_prep.tokenizer import train_tokenizer;"
        f"train_tokenizer({CORPUS!r}, 400, Path({str(tmp_path / 'again')!r}), {CHAT_TEMPLATE!r})"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        assert (tmp_path / "again" / name).read_bytes() == (tokenizer_dir / name).read_bytes()


def test_autotokenizer_loads_folder_offline_with_chat_template(tokenizer_dir):
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "</s>"


def test_retraining_into_existing_folder_replaces_it(tmp_path):
    out = tmp_path / "tok"
    train_tokenizer(CORPUS, 300, out)
    train_tokenizer(CORPUS, 350, out)
    assert len(load_tokenizer(out)) == 350
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok"]  # no staging folders left behind


def test_bad_inputs_raise_one_clear_error(tmp_path):
    with pytest.raises(NemotronError, match="vocab_size=100"):
        train_tokenizer(CORPUS, 100, tmp_path / "small")
    with pytest.raises(NemotronError, match="empty"):
        train_tokenizer([], 400, tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_load_tokenizer_names_missing_or_broken_folder(tokenizer_dir, tmp_path):
    with pytest.raises(NemotronError, match="not found: .*nowhere"):
        load_tokenizer(tmp_path / "nowhere")
    broken = tmp_path / "broken"
    broken.mkdir()
    for item in tokenizer_dir.iterdir():
        (broken / item.name).write_bytes(item.read_bytes())
    (broken / "tokenizer.json").write_text("{ not json")
    with pytest.raises(NemotronError, match=f"cannot load the tokenizer in {broken}"):
        load_tokenizer(broken)
    empty = tmp_path / "empty_folder"
    empty.mkdir()
    with pytest.raises(NemotronError, match=str(empty)):
        load_tokenizer(empty)


def _facts_of_transformers(folder):
    tokenizer = load_tokenizer(folder)
    return (tokenizer.backend_tokenizer.to_str(), len(tokenizer), tokenizer.eos_token_id)


def test_tokenizer_facts_match_what_transformers_loads_with_or_without_transformers(tokenizer_dir, tmp_path):
    # Our own folder is plain: read with `tokenizers` alone, it gives exactly what transformers gives.
    plain = tokenizer_facts(tokenizer_dir)
    assert (plain.backend_json, plain.size, plain.eos_token_id) == _facts_of_transformers(tokenizer_dir)
    assert plain.eos_token_id == EOS_ID
    # A config whose special token is not in tokenizer.json: transformers adds it (a larger vocabulary),
    # so the facts must come from transformers, not from tokenizer.json.
    odd = tmp_path / "odd"
    shutil.copytree(tokenizer_dir, odd)
    config = json.loads((odd / "tokenizer_config.json").read_text())
    config["eos_token"] = "<|end_of_text|>"
    (odd / "tokenizer_config.json").write_text(json.dumps(config))
    facts = tokenizer_facts(odd)
    assert (facts.backend_json, facts.size, facts.eos_token_id) == _facts_of_transformers(odd)
    assert facts.size == plain.size + 1 and facts.eos_token_id == plain.size
