"""Candidate pools: readable predicates, one Parquet set per pool, a manifest of counts."""

from __future__ import annotations

import json
import sys

import pytest

from nemotron.data_prep.post_training.pools import POOLS
from nemotron.data_prep.post_training.schema import read_records
from nemotron.errors import NemotronError
from nemotron.recipes.post_training_data import normalize, pools


@pytest.fixture(scope="module")
def demo_dataset(tmp_path_factory):
    return normalize.main(normalize.Config(output_dir=tmp_path_factory.mktemp("normalize")))


def test_pools_follow_their_predicates(tmp_path, demo_dataset):
    made = pools.main(pools.Config(dataset_path=demo_dataset.path, output_dir=tmp_path))
    manifest = json.loads((tmp_path / "pools" / "manifest.json").read_text())
    assert set(manifest) == {"hard", "high_correctness", "multi_turn", "proof", "reasoning", "tool_use"}
    files = pools.pool_files(made.pools_dir)
    tool_use = read_records(files["tool_use"])
    assert len(tool_use) == manifest["tool_use"]["records"] == made.pools["tool_use"] > 0
    assert all(r["meta_tool_use"]["calls"] > 0 for r in tool_use)
    assert {r["dataset"] for r in tool_use} == {"agentic", "math"}  # math TIR solutions call python
    assert all(r["meta_domain"] == "math_proofs" for r in read_records(files["proof"]))
    assert sum(manifest["tool_use"]["by_dataset"].values()) == manifest["tool_use"]["records"]


def test_a_user_adds_a_pool_with_one_predicate(tmp_path, demo_dataset, monkeypatch):
    (tmp_path / "my_pools.py").write_text(
        "from nemotron.data_prep.post_training.pools import pool\n\n"
        "@pool('short_answers', 'completion under 250 characters')\n"
        "def short_answers(record):\n"
        "    return len(record['text']) - record['completion_start'] < 250\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        made = pools.main(pools.Config(dataset_path=demo_dataset.path, output_dir=tmp_path / "out",
                                       pools=("short_answers", "proof"), pool_modules=("my_pools",)))
        short = read_records(pools.pool_files(made.pools_dir)["short_answers"])
        assert short and all(len(r["text"]) - r["completion_start"] < 250 for r in short)
        assert set(made.pools) == {"short_answers", "proof"}
    finally:
        POOLS.pop("short_answers", None)
        sys.modules.pop("my_pools", None)


def test_unknown_pool_is_refused(tmp_path, demo_dataset):
    with pytest.raises(NemotronError, match="unknown pool.*nope.*known: hard"):
        pools.main(pools.Config(dataset_path=demo_dataset.path, output_dir=tmp_path, pools=("nope",)))
