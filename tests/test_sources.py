"""Readers: text, JSONL, Parquet, Hugging Face `datasets` (local files only), and the offline corpora."""

import json
import os
import re
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nemotron.data_prep.sources import (
    SCENE_HEADING,
    Document,
    read_chatterbot,
    read_hf_dataset,
    read_jsonl,
    read_parquet,
    read_shakespeare,
    read_source,
    read_text,
    strip_gutenberg_boilerplate,
)
from nemotron.errors import NemotronError

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def shakespeare():
    return read_shakespeare()


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------ text

def test_text_folder_gives_one_document_per_file_in_path_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.txt").write_text("second file", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first file\n", encoding="utf-8")
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "ignored.csv").write_text("not text", encoding="utf-8")
    docs, skipped = read_text(tmp_path)
    assert [(d.id, d.text) for d in docs] == [("a.txt", "first file"), ("b/two.txt", "second file")]
    assert skipped == {"empty text": 1}


def test_text_split_by_blank_lines_or_a_delimiter(tmp_path):
    file = tmp_path / "poems.txt"
    file.write_text("one\nline two\n\n \n\nthree<|end|>four", encoding="utf-8")
    assert [d.text for d in read_text(file, split="blank_line").documents] == ["one\nline two", "three<|end|>four"]
    docs = read_text(file, split="<|end|>").documents
    assert [(d.id, d.text) for d in docs] == [("poems.txt#0", "one\nline two\n\n \n\nthree"), ("poems.txt#1", "four")]


def test_an_empty_source_or_unreadable_file_names_the_path(tmp_path):
    (tmp_path / "blank.txt").write_text("\n", encoding="utf-8")
    with pytest.raises(NemotronError, match="no documents found in .*blank.txt"):
        read_text(tmp_path / "blank.txt")
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(NemotronError, match="latin1.txt.*UTF-8"):
        read_text(tmp_path / "latin1.txt")
    with pytest.raises(NemotronError, match="not found: .*missing"):
        read_text(tmp_path / "missing")


# --------------------------------------------------------------------------- JSONL / Parquet

def test_jsonl_reads_text_ids_and_meta_and_counts_what_it_skips(tmp_path):
    _write_jsonl(tmp_path / "data.jsonl", [{"id": 7, "text": "hello", "lang": "en"}, {"text": ""},
                                           {"body": "wrong field"}, {"text": "world"}])
    docs, skipped = read_jsonl(tmp_path / "data.jsonl")
    assert docs == [Document("7", "hello", str(tmp_path / "data.jsonl"), {"lang": "en"}),
                    Document("data.jsonl:4", "world", str(tmp_path / "data.jsonl"), {})]
    assert skipped == {"empty text": 1, "missing text field 'text'": 1}
    assert [d.text for d in read_jsonl(tmp_path, text_field="body").documents] == ["wrong field"]


def test_jsonl_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"text": oops}\n', encoding="utf-8")
    with pytest.raises(NemotronError, match=r"bad.jsonl:2: not valid JSON"):
        read_jsonl(tmp_path / "bad.jsonl")
    _write_jsonl(tmp_path / "other.jsonl", [{"content": "x"}])
    with pytest.raises(NemotronError, match="other.jsonl.*text_field"):
        read_jsonl(tmp_path / "other.jsonl")


def test_parquet_reads_a_text_column_and_refuses_a_missing_one(tmp_path):
    pq.write_table(pa.table({"text": ["alpha", None, "beta"], "score": [1, 2, 3]}), tmp_path / "t.parquet")
    docs, skipped = read_parquet(tmp_path / "t.parquet")
    assert [(d.id, d.text, d.meta) for d in docs] == [("t.parquet:0", "alpha", {"score": 1}),
                                                     ("t.parquet:2", "beta", {"score": 3})]
    assert skipped == {"missing text field 'text'": 1}
    with pytest.raises(NemotronError, match="no column 'content'.*text"):
        read_parquet(tmp_path / "t.parquet", text_field="content")
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(NemotronError, match="broken.parquet"):
        read_parquet(tmp_path / "broken.parquet")


def test_hf_datasets_path_loads_local_json_and_parquet(tmp_path):
    _write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "first"}, {"id": "b", "text": "second"}])
    pq.write_table(pa.table({"text": ["third", "fourth"]}), tmp_path / "d.parquet")
    from_json = read_hf_dataset("json", data_files=str(tmp_path / "d.jsonl"), cache_dir=tmp_path / "cache")
    assert [(d.id, d.text) for d in from_json.documents] == [("a", "first"), ("b", "second")]
    from_parquet = read_hf_dataset("parquet", data_files=str(tmp_path / "d.parquet"), cache_dir=tmp_path / "cache")
    assert [d.text for d in from_parquet.documents] == ["third", "fourth"]
    with pytest.raises(NemotronError, match="cannot load dataset 'json'"):
        read_hf_dataset("json", data_files=str(tmp_path / "nope.jsonl"), cache_dir=tmp_path / "cache")


# ----------------------------------------------------------------------------- Shakespeare

def test_shakespeare_is_cut_into_scenes_with_stable_ids(shakespeare):
    docs = shakespeare.documents
    by_id = {d.id: d for d in docs}
    assert len(by_id) == len(docs) > 900
    scene = by_id["shakespeare/hamlet/1.1"]
    assert scene.meta == {"play": "hamlet", "title": "Hamlet", "act": 1, "scene": 1,
                          "heading": "Scene I. Elsinore. A platform before the Castle."}
    assert scene.text.startswith("ACT I.\n\nScene I. Elsinore.") and "Who's there?" in scene.text
    assert "Scene II." not in scene.text
    assert "Shall I compare thee to a summer's day?" in by_id["shakespeare/sonnets/18"].text
    assert by_id["shakespeare/henry_v/2.0"].text.startswith("ACT II.\n\nPROLOGUE.")  # a chorus before scene 1
    assert [d.id for d in read_shakespeare().documents] == [d.id for d in docs]


def test_every_play_document_holds_at_most_one_scene(shakespeare):
    plays = [d for d in shakespeare.documents if "play" in d.meta]
    assert len({d.meta["play"] for d in plays}) == 37
    for doc in plays:
        headings = [line for line in doc.text.split("\n") if SCENE_HEADING.match(line)]
        assert len(headings) <= 1, doc.id
    assert all(d.meta["scene"] > 0 for d in plays if d.meta["act"] > 0 and SCENE_HEADING.match(d.meta["heading"]))


def test_plays_only_leaves_out_poems_and_counts_them(shakespeare):
    docs, skipped = read_shakespeare(include_poems=False)
    assert all("play" in d.meta for d in docs)
    assert skipped["poem (include_poems=False)"] == len(shakespeare.documents) - len(docs) > 150


def test_gutenberg_header_and_licence_are_stripped():
    raw = ("The Project Gutenberg EBook of Hamlet\nLicence text\n"
           "*** START OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\n\nACT I.\nWho's there?\n"
           "*** END OF THIS PROJECT GUTENBERG EBOOK HAMLET ***\nMore licence\n")
    assert strip_gutenberg_boilerplate(raw).strip() == "ACT I.\nWho's there?"
    assert strip_gutenberg_boilerplate("no markers") == "no markers"


# ------------------------------------------------------------------------------ chatterbot

def test_chatterbot_conversations_alternate_and_end_with_the_assistant():
    conversations, skipped = read_chatterbot()
    assert 1900 < len(conversations) < 2100
    assert len({c["id"] for c in conversations}) == len(conversations)
    assert len(Counter(c["category"] for c in conversations)) >= 19
    for conversation in conversations:
        roles = [m["role"] for m in conversation["messages"]]
        assert roles == ["user", "assistant"] * (len(roles) // 2) and roles, conversation["id"]
        assert all(m["content"] for m in conversation["messages"])
    assert conversations[0]["messages"][0] == {"role": "user", "content": "What is AI?"}
    assert skipped["malformed conversation"] == 1  # trivia.yml has one entry that is not a list
    assert read_chatterbot()[0] == conversations


# ---------------------------------------------------------------------------- read_source

def test_read_source_picks_the_reader_by_name_suffix_or_folder(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", [{"text": "from jsonl"}])
    pq.write_table(pa.table({"text": ["from parquet"]}), tmp_path / "b.parquet")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "c.txt").write_text("from text", encoding="utf-8")
    assert read_source("a.jsonl", base_dir=tmp_path).documents[0].text == "from jsonl"
    assert read_source(str(tmp_path / "b.parquet")).documents[0].text == "from parquet"
    docs = read_source("texts", base_dir=tmp_path, source="mine").documents
    assert [(d.text, d.source) for d in docs] == [("from text", "mine")]
    chat = read_source("chatterbot", source="chat").documents
    assert chat[0].source == "chat" and chat[0].meta["messages"][0]["role"] == "user"


def test_read_source_refuses_missing_mixed_or_offline_sources(tmp_path):
    with pytest.raises(NemotronError, match="source not found"):
        read_source("missing.jsonl", base_dir=tmp_path)
    _write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}])
    (tmp_path / "b.txt").write_text("y", encoding="utf-8")
    with pytest.raises(NemotronError, match=re.escape("found formats ['jsonl', 'text']")):
        read_source(str(tmp_path))
    with pytest.raises(NemotronError, match="cannot load dataset 'nobody/no-such-dataset'"):
        read_source("nobody/no-such-dataset")
