"""Exact and MinHash-LSH near-duplicate removal on real Shakespeare text."""

import pytest

from nemotron.data_prep.dedup import exact_dedup, near_dedup, normalize
from nemotron.data_prep.sources import Document, read_shakespeare
from nemotron.errors import NemotronError


@pytest.fixture(scope="module")
def hamlet():
    docs = read_shakespeare(include_poems=False).documents
    return [d for d in docs if d.meta["play"] == "hamlet" and d.meta["scene"] > 0]


def _edited(doc: Document, new_id: str, every: int = 150) -> Document:
    """The same scene with every `every`-th word replaced: a re-edited copy."""
    words = doc.text.split(" ")
    for i in range(0, len(words), every):
        words[i] = "changed"
    return Document(new_id, " ".join(words), doc.source, doc.meta)


def test_exact_dedup_ignores_case_and_spacing_and_keeps_the_first():
    docs = [Document("a", "To be, or not to be", "t"), Document("b", "to be,  or NOT to be\n", "t"),
            Document("c", "To be, or not to be: that is the question", "t")]
    kept, counts = exact_dedup(docs)
    assert [d.id for d in kept] == ["a", "c"]
    assert counts == {"exact_duplicates": 1}
    assert normalize(" A\tB \n") == "a b"


def test_a_scene_with_a_few_words_changed_is_a_near_duplicate(hamlet):
    scene = hamlet[0]
    copy = _edited(scene, "hamlet-1.1-edited")
    assert copy.text != scene.text
    assert exact_dedup([scene, copy])[1] == {"exact_duplicates": 0}  # exact hashing cannot see it
    kept, counts = near_dedup([scene, copy, hamlet[1]])
    assert [d.id for d in kept] == [scene.id, hamlet[1].id]
    assert counts == {"near_duplicates": 1}


def test_the_first_of_a_near_duplicate_pair_in_input_order_survives(hamlet):
    copy = _edited(hamlet[2], "edited-first")
    kept, _ = near_dedup([copy, hamlet[2]])
    assert [d.id for d in kept] == ["edited-first"]


def test_different_scenes_are_all_kept(hamlet):
    kept, counts = near_dedup(hamlet)
    assert kept == hamlet
    assert counts == {"near_duplicates": 0}


def test_a_heavily_rewritten_scene_is_kept(hamlet):
    rewritten = _edited(hamlet[3], "rewritten", every=3)  # a third of the words replaced
    kept, _ = near_dedup([hamlet[3], rewritten])
    assert len(kept) == 2


def test_near_dedup_is_deterministic_and_seeded(hamlet):
    docs = [d for scene in hamlet[:6] for d in (scene, _edited(scene, scene.id + "-copy"))]
    first = near_dedup(docs, seed=7, num_perm=64)
    assert near_dedup(docs, seed=7, num_perm=64) == first
    assert [d.id for d in first[0]] == [d.id for d in hamlet[:6]]


def test_near_dedup_works_on_any_items_through_text_of():
    text = "the quick brown fox jumps over the lazy dog " * 5
    rows = [{"text": text}, {"text": text + "!"}]
    kept, counts = near_dedup(rows, text_of=lambda row: row["text"])
    assert len(kept) == 1 and counts["near_duplicates"] == 1


def test_a_threshold_outside_zero_one_is_refused():
    with pytest.raises(NemotronError, match="threshold"):
        near_dedup([], threshold=1.5)
