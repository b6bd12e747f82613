"""nano2 stage-0 curation's `quality_threshold` (the recipe guide's knob): a document's quality score is the
share of the heuristic filters it passes; it is kept at or above the threshold. The default, 1.0 (every filter
passes), is today's curation, and stays out of the recorded config so the published digests hold."""

import pytest

from nemotron.artifact.fields import recorded
from nemotron.data_prep.blend import default_pretrain_blend
from nemotron.data_prep.curation import curation_run_hash
from nemotron.data_prep.quality import TextStats
from nemotron.data_prep.stages.dedup import SignatureStage
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.stage0_pretrain.data_curation import Config, main

# Fails the Gopher word-count filter (fewer than 50 words) and nothing else a scene of prose would fail.
SHORT_LINE = "The quick brown fox jumps over the lazy dog and then it runs away to the forest."


def stage(threshold: float) -> SignatureStage:
    s = SignatureStage([1.0, 0.0, 0.0], quality_threshold=threshold)
    s.setup()
    return s


def test_a_document_failing_one_filter_of_many_is_kept_at_the_guide_s_0_7_and_rejected_at_the_default():
    stats = TextStats(SHORT_LINE)
    failed = [f.name for f in stage(1.0)._filters if not f.keep(stats)]
    assert failed == ["word_count"], failed
    names = [f.name for f in stage(1.0)._filters]
    assert stage(1.0).rejected_by(stats) == names.index("word_count")  # today's verdict
    assert 1 - 1 / len(names) >= 0.7 and stage(0.7).rejected_by(stats) == -1
    symbols = TextStats("### $$$ {{}} ... " * 30)  # fails 7 of the 22 filters: a score of 15/22 < 0.7
    assert stage(0.7).rejected_by(symbols) == stage(1.0).rejected_by(symbols) == names.index("mean_word_length")


def test_the_knob_is_recorded_when_set_and_the_default_leaves_config_and_run_hash_as_they_were():
    default, guide = Config(), Config(quality_threshold=0.7)
    assert "quality_threshold" not in recorded(default) and recorded(guide)["quality_threshold"] == 0.7
    blend = default_pretrain_blend()
    assert curation_run_hash(default, blend, []) != curation_run_hash(guide, blend, [])
    assert SignatureStage(None).fingerprint() == {k: v for k, v in SignatureStage(None, quality_threshold=1.0)
                                                  .fingerprint().items()}
    assert SignatureStage(None, quality_threshold=0.7).fingerprint()["quality_threshold"] == 0.7


@pytest.mark.parametrize("threshold", [0.0, 1.5])
def test_a_threshold_outside_0_to_1_is_refused_before_any_work(threshold, tmp_path):
    with pytest.raises(NemotronError, match=r"--quality-threshold .* must be in \(0, 1\]"):
        main(Config(quality_threshold=threshold, output_dir=tmp_path / "out"))
    assert not (tmp_path / "out").exists()
