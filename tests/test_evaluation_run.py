"""`nemotron.evaluation.run.EvaluationRun`: the opening and closing every evaluation step shares.

The evaluation steps' own tests (test_nano2_evaluation.py, the recipe tests) check what each step
measures through it; these check the bookkeeping a step relies on, on a real tiny checkpoint.
"""

from __future__ import annotations

import json

import pytest
import torch

from builders import make_pretrain_checkpoint  # tests/ is on sys.path under pytest
from nemotron.artifact import METADATA
from nemotron.errors import NemotronError
from nemotron.evaluation.run import EvaluationRun
from nemotron.evaluation.settings import EvaluationSettings, LMEvalSettings
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainResults


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_pretrain_checkpoint(tmp_path_factory.mktemp("checkpoint"))


def test_bad_benchmark_flags_are_refused_before_the_checkpoint_is_read(tmp_path):
    config = LMEvalSettings(checkpoint_path=tmp_path / "not_there", benchmarks=("mmlu",), output_dir=tmp_path / "out")
    with pytest.raises(NemotronError, match="--benchmarks mmlu needs --harness lm_eval"):
        EvaluationRun(config, PretrainCheckpoint)
    assert not (tmp_path / "out").exists()


def test_models_come_one_after_the_other_with_the_step_thread_count(checkpoint, tmp_path):
    before = torch.get_num_threads()
    wanted = 1 if before != 1 else 2
    evaluation = EvaluationRun(EvaluationSettings(checkpoint_path=checkpoint.path, num_threads=wanted,
                                                  output_dir=tmp_path), PretrainCheckpoint)
    seen = []
    for name, model, tokenizer in evaluation.models(first=checkpoint, second=checkpoint):
        assert torch.get_num_threads() == wanted and not model.training and len(tokenizer) > 0
        seen.append((name, id(model)))
    assert [name for name, _ in seen] == ["first", "second"] and seen[0][1] != seen[1][1]  # loaded anew for each
    assert torch.get_num_threads() == before  # the step's count holds inside the loop only


def test_save_replaces_an_earlier_artifact_with_samples_and_the_run_time(checkpoint, tmp_path):
    out = tmp_path / "evaluation"
    out.mkdir()
    (out / METADATA).write_text("{}")  # a stale artifact of an earlier run
    config = LMEvalSettings(checkpoint_path=checkpoint.path, output_dir=out)
    evaluation = EvaluationRun(config, PretrainCheckpoint)
    assert (out / METADATA).exists()  # nothing is marked before the step writes
    numbers = dict(validation_loss=6.0, perplexity=403.4, bits_per_byte=2.5, unigram_loss=6.5,
                   unigram_bits_per_byte=2.7)
    results = evaluation.save(PretrainResults, inputs=[checkpoint], metrics={"num_windows": 3, **numbers},
                              samples=[{"prompt": "A", "completion": "b"}], num_tokens=100, **numbers)

    saved = PretrainResults.load(path=out)
    assert saved.digest == results.digest and [ref.digest for ref in saved.inputs] == [checkpoint.digest]
    assert json.loads(saved.samples_path.read_text()) == [{"prompt": "A", "completion": "b"}]
    assert list(saved.metrics)[-1] == "wall_seconds" and saved.metrics["wall_seconds"] >= 0
    assert (saved.harness, saved.benchmarks, saved.lm_eval_results) == ("ours", [], None)
    assert saved.config["checkpoint_path"] == str(checkpoint.path) and saved.scale == "tiny"
