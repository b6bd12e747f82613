"""Quality filters: garbage is removed by the filter meant for it, real Shakespeare mostly passes."""

import pytest

from nemotron.data_prep.quality import QualityFilter, TextStats, apply_filters, default_filters, word_count
from nemotron.data_prep.sources import Document, read_shakespeare

PROSE = ("The history of the river is the history of the town that grew along its banks. "
         "Farmers brought their grain to the mill, and merchants built warehouses near the water "
         "so that boats could carry goods to the coast. Over the years the town changed with the river: "
         "floods destroyed the lower streets twice, and each time the people rebuilt them a little higher. "
         "Today the old mill is a museum, and children learn there how the water turned the great stones.")

# Each crafted document fails exactly the rule written for its kind of garbage (and passes the rules
# before it), so the test also checks the filter order and the "first filter that rejected" count.
GARBAGE = {
    "word_count": "Buy cheap watches now!",
    "mean_word_length": " ".join(["a b c d e f g h i j to of the and"] * 8),
    "symbol_to_word_ratio": " ".join(f"#tag{i} the best of and with #love #food..." for i in range(12)),
    "bullet_lines": "\n".join(f"• Item number {i} of the list and the price with tax" for i in range(20)),
    "ellipsis_lines": "\n".join("Read more about the story of the day and what it means to you..." if i % 2
                                else "This is the news of the day and the rest of it." for i in range(20)),
    "alphabetic_words": "the and of to " + " ".join(str(1000 + i * 7) for i in range(80)),
    "stop_words": " ".join(["lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"] * 6),
    "non_alphanumeric": " ".join(["<<the>> **and** ==of== //to// ~~with~~ that!! have?? be!!"] * 8),
    "curly_brackets": "\n".join(f"function go{i}(value) {{ return value and the rest of that to be with; }}"
                                for i in range(15)),
    "lorem_ipsum": PROSE + " Lorem ipsum dolor sit amet.",
    "end_punctuation": "\n".join(f"Home page link {i} of the site and the menu with that item" for i in range(30)),
    "duplicate_lines": "\n".join(["Click here to subscribe to the newsletter and be the first to know."] * 6
                                 + [PROSE]),
    "top_2gram": " ".join(["cheap shoes"] * 30) + " " + PROSE,
    "duplicate_5grams": PROSE + " " + PROSE,
}


@pytest.fixture(scope="module")
def shakespeare():
    return read_shakespeare().documents


@pytest.mark.parametrize("expected", sorted(GARBAGE))
def test_each_kind_of_garbage_is_removed_by_its_filter(expected):
    kept, counts = apply_filters([GARBAGE[expected]], default_filters(), text_of=lambda text: text)
    assert kept == []
    assert [name for name, count in counts.items() if count] == [expected]


def test_clean_prose_passes_every_filter():
    kept, counts = apply_filters([PROSE], default_filters(), text_of=lambda text: text)
    assert kept == [PROSE]
    assert sum(counts.values()) == 0


def test_apply_filters_keeps_order_and_accounts_for_every_document():
    docs = [Document(f"d{i}", text, "test") for i, text in enumerate([PROSE, *GARBAGE.values(), PROSE + " Yes."])]
    filters = default_filters()
    kept, counts = apply_filters(docs, filters)
    assert [d.id for d in kept] == ["d0", f"d{len(docs) - 1}"]
    assert list(counts) == [f.name for f in filters]  # every filter reported, in order, even at 0
    assert len(kept) + sum(counts.values()) == len(docs)


def test_every_filter_has_a_name_a_bound_and_a_reference():
    filters = default_filters()
    assert len({f.name for f in filters}) == len(filters)
    for f in filters:
        assert f.reference, f.name
        assert f.min_value > float("-inf") or f.max_value < float("inf"), f.name


def test_a_filter_keeps_inside_its_bounds_only():
    rule = QualityFilter("words", word_count, min_value=3, max_value=5)
    texts = ["one two", "one two three", "a b c d e", "a b c d e f"]
    assert [rule.keep(t) for t in texts] == [False, True, True, False]
    assert rule.keep(TextStats("one two three four"))


def test_speaker_tags_do_not_count_as_duplicate_lines_but_repeated_verse_does():
    dialogue = "\n".join(f"Ham.\nThis is my line number {i}, spoken with the rest of that.\nHor.\n"
                         f"And I answer thee to the {i} time, my good lord." for i in range(20))
    assert apply_filters([dialogue], default_filters(), text_of=str)[1]["duplicate_lines"] == 0
    refrain = "\n".join(["With a hey, and a ho, and a hey nonino, that o'er the green corn-field did pass."] * 20
                        + dialogue.split("\n")[:20])
    kept, counts = apply_filters([refrain], default_filters(), text_of=str)
    assert kept == [] and counts["duplicate_lines"] == 1


def test_most_real_shakespeare_scenes_pass(shakespeare):
    kept, counts = apply_filters(shakespeare, default_filters())
    scenes = [d for d in shakespeare if d.meta.get("scene", 0) > 0]
    kept_ids = {d.id for d in kept}
    passed = [d for d in scenes if d.id in kept_ids]
    assert len(passed) / len(scenes) > 0.97, counts
    assert len(kept) / len(shakespeare) > 0.95, counts
    # The title pages ("THE SONNETS / by William Shakespeare") are too short to be a document.
    assert "shakespeare/sonnets/0" not in kept_ids
    assert "shakespeare/sonnets/18" in kept_ids
