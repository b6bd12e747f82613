"""Embeddings pooled as each model was trained (`nemotron.models.embeddings.Pooling`), checked against
sentence-transformers' own `encode` (the test extra pins it): the shipped all-MiniLM-L6-v2 (mean pooling,
normalized, 256 tokens) and a small random encoder saved with last-token pooling, left padding and a 16-token
limit, the way a Qwen3-Embedding folder is laid out."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from nemotron.errors import NemotronError
from nemotron.models.embeddings import Pooling, embed, minilm_folder

st = pytest.importorskip("sentence_transformers")  # the test extra installs it; never at run time

TEXTS = ["What is the weather in Lyon?", "Prove that the square root of two is irrational, step by step, "
         "without assuming anything beyond the definitions of the integers and of a rational number.",
         "hi", "A tool call: get_weather(city='Nice') returned 18 C and light rain."]


def test_minilm_is_mean_pooled_normalized_and_cut_at_256_as_sentence_transformers_does():
    folder = minilm_folder()
    assert Pooling.read(folder) == Pooling(("mean",), normalize=True, max_length=256)
    expected = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS, convert_to_numpy=True)
    np.testing.assert_allclose(embed(TEXTS, "minilm"), expected, atol=1e-5)


def test_a_model_saved_with_last_token_pooling_is_pooled_on_its_last_token(tmp_path):
    import torch
    from sentence_transformers import models
    from transformers import AutoTokenizer, BertConfig, BertModel

    torch.manual_seed(0)
    encoder = tmp_path / "encoder"
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(encoder)
    AutoTokenizer.from_pretrained(minilm_folder()).save_pretrained(encoder)
    st.SentenceTransformer(modules=[models.Transformer(str(encoder), max_seq_length=16),
                                    models.Pooling(32, pooling_mode="lasttoken"), models.Normalize()],
                           device="cpu").save(str(tmp_path / "model"))
    settings = tmp_path / "model" / "tokenizer_config.json"  # sentence-transformers 6 keeps the 16 here
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "padding_side": "left"}))  # as Qwen3's

    pooling = Pooling.read(tmp_path / "model")
    assert pooling == Pooling(("lasttoken",), normalize=True, max_length=None)
    model = st.SentenceTransformer(str(tmp_path / "model"), device="cpu")
    assert model.tokenizer.padding_side == "left" and model.max_seq_length == 16
    expected = model.encode(TEXTS, convert_to_numpy=True)
    ours = embed(TEXTS, str(tmp_path / "model"), batch_size=4)
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    assert np.abs(ours - embed(TEXTS, str(encoder), batch_size=4)).max() > 0.01  # mean pooling would differ


def test_a_pooling_we_do_not_compute_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(minilm_folder(), folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "weightedmean"}))
    with pytest.raises(NemotronError, match=r"1_Pooling/config.json: pooling \['weightedmean'\] is not computed"):
        Pooling.read(folder)
