"""Data blends: JSON spec, one-line validation errors, hash splits and weighted, seeded draws."""

import json
import os
import random
from collections import Counter

import pytest

from nemotron.data_prep.blend import BlendSource, DataBlend, assign_split, default_pretrain_blend
from nemotron.data_prep.quality import apply_filters, default_filters
from nemotron.data_prep.sources import Document
from nemotron.errors import NemotronError

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _jsonl(path, texts, prefix):
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "text": t}) + "\n" for i, t in enumerate(texts)),
                    encoding="utf-8")
    return path


@pytest.fixture
def two_sources(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    _jsonl(data / "big.jsonl", [f"big document {i}" for i in range(100)], "big-")
    _jsonl(data / "small.jsonl", [f"small document {i}" for i in range(50)], "small-")
    return tmp_path


@pytest.fixture(scope="module")
def shakespeare_blend_docs():
    return default_pretrain_blend().read()[0]


def test_load_resolves_paths_against_the_blend_file_and_save_round_trips(two_sources, tmp_path, monkeypatch):
    spec = {"sources": [{"path": "data/big.jsonl", "weight": 2.0}, {"path": "data/small.jsonl", "weight": 1.0}],
            "split": [0.8, 0.1, 0.1]}
    (two_sources / "blend.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.chdir(tmp_path.parent)  # the working directory must not matter
    blend = DataBlend.load(two_sources / "blend.json")
    assert [s.weight for s in blend.sources] == [2.0, 1.0]
    assert blend.read()[1] == {"data/big.jsonl": {"read": 100, "skipped": {}},
                               "data/small.jsonl": {"read": 50, "skipped": {}}}
    blend.save(two_sources / "copy.json")
    assert DataBlend.load(two_sources / "copy.json") == blend
    (two_sources / "elsewhere").mkdir()
    blend.save(two_sources / "elsewhere" / "moved.json")  # relative paths follow the file
    moved = DataBlend.load(two_sources / "elsewhere" / "moved.json")
    assert moved.sources[0].path == "../data/big.jsonl"
    assert len(moved.read()[0]) == 150
    assert not list(two_sources.glob(".*.tmp")) and not list((two_sources / "elsewhere").glob(".*.tmp"))


@pytest.mark.parametrize("spec, message", [
    ({"sources": [{"path": "shakespeare", "weight": -1}]}, "sources[0].weight: must be a positive number"),
    ({"sources": [{"path": "shakespeare", "weight": 0}]}, "sources[0].weight: must be a positive number"),
    ({"sources": [{"path": "shakespeare", "wieght": 1}]}, "sources[0].wieght: unknown field"),
    ({"sources": [{"weight": 1}]}, "sources[0].path: required field is missing"),
    ({"sources": [{"path": "shakespeare"}, {"path": "missing.jsonl"}]}, "sources[1].path: 'missing.jsonl' not found"),
    ({"sources": [{"path": "shakespeare"}], "split": [0.9, 0.2, 0.0]}, "split: must be three ratios"),
    ({"sources": [{"path": "shakespeare"}], "split": [0.5, 0.5]}, "split: must be three ratios"),
    ({"sources": [{"path": "shakespeare"}], "train": [{"path": "shakespeare"}]}, "not both"),
    ({"train": [{"path": "shakespeare"}], "split": [1, 0, 0]}, "drop 'split'"),
    ({"sources": []}, "non-empty 'sources'"),
    ({"sources": [{"path": "shakespeare"}, {"path": "shakespeare"}]}, "names must be unique"),
    ({"train": [{"path": "chatterbot"}], "valid": [{"path": "chatterbot"}]}, "names must be unique"),
])
def test_each_mistake_is_one_line_naming_the_field(tmp_path, spec, message):
    (tmp_path / "blend.json").write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(NemotronError) as error:
        DataBlend.load(tmp_path / "blend.json")
    assert str(error.value).startswith(f"{tmp_path / 'blend.json'}: ")
    assert message in str(error.value) and "\n" not in str(error.value)


def test_unreadable_blend_files_are_clear_errors(tmp_path):
    with pytest.raises(NemotronError, match="blend file not found"):
        DataBlend.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(NemotronError, match="bad.json: not a readable JSON blend"):
        DataBlend.load(tmp_path / "bad.json")


def test_hub_ids_and_built_in_names_are_valid_sources():
    blend = DataBlend.from_dict({"sources": [{"path": "shakespeare"}, {"path": "HuggingFaceFW/fineweb-edu",
                                                                       "subset": "sample-10BT", "weight": 0.5}]})
    assert blend.split == [1.0, 0.0, 0.0] and blend.splits == ["train"]


def test_split_depends_only_on_the_document_id():
    ids = [f"doc-{i}" for i in range(4000)]
    ratios = [0.8, 0.15, 0.05]
    splits = {doc_id: assign_split(doc_id, ratios) for doc_id in ids}
    shuffled = ids[:]
    random.Random(3).shuffle(shuffled)
    assert {doc_id: assign_split(doc_id, ratios) for doc_id in shuffled} == splits
    shares = Counter(splits.values())
    assert abs(shares["train"] / 4000 - 0.8) < 0.03 and abs(shares["test"] / 4000 - 0.05) < 0.02
    assert all(assign_split(doc_id, [1.0, 0.0, 0.0]) == "train" for doc_id in ids[:100])


def test_weights_set_each_sources_share_and_upsample_past_its_size(two_sources):
    blend = DataBlend.from_dict({"sources": [{"path": "data/big.jsonl", "weight": 1.0, "name": "big"},
                                             {"path": "data/small.jsonl", "weight": 3.0, "name": "small"}]},
                                base_dir=two_sources)
    drawn, counts = blend.documents("train", seed=0, num_documents=200)
    assert Counter(d.source for d in drawn) == {"big": 50, "small": 150}
    assert counts["sources"] == {"big": {"available": 100, "drawn": 50}, "small": {"available": 50, "drawn": 150}}
    assert set(Counter(d.id for d in drawn if d.source == "small").values()) == {3}  # three full passes
    assert len({d.id for d in drawn if d.source == "big"}) == 50  # without replacement
    again, _ = blend.documents("train", seed=0, num_documents=200)
    assert [d.id for d in again] == [d.id for d in drawn]
    other, _ = blend.documents("train", seed=1, num_documents=200)
    assert [d.id for d in other] != [d.id for d in drawn]


def test_by_default_a_blend_draws_as_many_documents_as_its_split_holds(two_sources):
    blend = DataBlend.from_dict({"sources": [{"path": "data/big.jsonl"}, {"path": "data/small.jsonl"}],
                                 "split": [0.5, 0.5, 0.0]}, base_dir=two_sources)
    docs, _ = blend.read()
    train, _ = blend.draw(docs, "train")
    valid, _ = blend.draw(docs, "valid")
    assert len(train) + len(valid) == 150
    assert not {d.id for d in train} & {d.id for d in valid}
    with pytest.raises(NemotronError, match="no 'test' split"):
        blend.draw(docs, "test")


def test_separate_split_lists_keep_their_own_sources(two_sources):
    blend = DataBlend.from_dict({"train": [{"path": "data/big.jsonl"}], "valid": [{"path": "data/small.jsonl"}]},
                                base_dir=two_sources)
    assert blend.splits == ["train", "valid"]
    docs, _ = blend.read()
    assert {d.source for d in blend.draw(docs, "valid")[0]} == {"data/small.jsonl"}
    assert len(blend.draw(docs, "train")[0]) == 100
    with pytest.raises(NemotronError, match="no 'test' split"):
        blend.draw(docs, "test")


def test_an_empty_split_is_an_error_not_an_empty_file(two_sources):
    blend = DataBlend.from_dict({"sources": [{"path": "data/small.jsonl"}], "split": [0.5, 0.5, 0.0]},
                                base_dir=two_sources)
    train_only = next(f"d{i}" for i in range(100) if assign_split(f"d{i}", blend.split) == "train")
    docs = [Document(train_only, "text", "data/small.jsonl")]
    assert len(blend.draw(docs, "train")[0]) == 1
    with pytest.raises(NemotronError, match="split 'valid' received no documents"):
        blend.draw(docs, "valid")


def test_default_pretrain_blend_splits_shakespeare_without_overlap(shakespeare_blend_docs):
    blend = default_pretrain_blend()
    assert [s.path for s in blend.sources] == ["shakespeare"]
    parts = {split: blend.draw(shakespeare_blend_docs, split, seed=0)[0] for split in blend.splits}
    ids = {split: {d.id for d in docs} for split, docs in parts.items()}
    assert sum(len(v) for v in ids.values()) == len(shakespeare_blend_docs)
    assert not (ids["train"] & ids["valid"]) and not (ids["train"] & ids["test"])
    assert 20 < len(ids["valid"]) < 80


def test_filtering_between_read_and_draw_does_not_move_documents_between_splits(shakespeare_blend_docs):
    blend = default_pretrain_blend()
    docs = shakespeare_blend_docs[:300]  # the first plays, cast lists included (some fail the filters)
    kept, counts = apply_filters(docs, default_filters())
    assert sum(counts.values()) > 0
    valid_before = {d.id for d in blend.draw(docs, "valid")[0]}
    valid_after = {d.id for d in blend.draw(kept, "valid")[0]}
    assert valid_after == valid_before & {d.id for d in kept}


def test_blend_source_defaults():
    source = BlendSource(path="shakespeare")
    assert (source.weight, source.label, source.text_field) == (1.0, "shakespeare", "text")
