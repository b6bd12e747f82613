"""Completion-only NLL scoring: equal to lm-eval's loglikelihood, resumable, selection per pool."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pytest
import torch

from nemotron.data_prep.post_training.schema import read_records
from nemotron.data_prep.post_training.selection import select_by_score
from nemotron.errors import NemotronError
from nemotron.models.reference import random_reference_model
from nemotron.recipes.post_training_data import normalize, pools, score


@pytest.fixture(scope="module")
def demo_dataset(tmp_path_factory):
    return normalize.main(normalize.Config(output_dir=tmp_path_factory.mktemp("pipeline") / "normalize"))


@pytest.fixture(scope="module")
def demo_pools(tmp_path_factory, demo_dataset):
    return pools.main(pools.Config(dataset_path=demo_dataset.path, output_dir=tmp_path_factory.mktemp("pools"),
                                   pools=("tool_use", "proof", "multi_turn")))


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, demo_pools):
    """A local Hugging Face folder: a byte-level BPE trained on the records and a random tiny Llama."""
    folder = tmp_path_factory.mktemp("reference") / "model"
    texts = [r["text"] for files in pools.pool_files(demo_pools.pools_dir).values() for r in read_records(files)]
    return random_reference_model(texts, folder, hidden_size=32)


def run_score(tmp_path, demo_pools, checkpoint, **changes):
    return score.main(score.Config(pools_path=demo_pools.path, reference_model=str(checkpoint),
                                   output_dir=tmp_path, chunk_records=4, **changes))


@pytest.mark.slow  # lm-eval's import and task setup take ~25 s on 2 cores
def test_nll_equals_lm_eval_loglikelihood(tmp_path, demo_pools, tiny_checkpoint):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    scored = run_score(tmp_path / "ours", demo_pools, tiny_checkpoint)
    ours = {r["id"]: r for r in read_records(scored.scores_path)}
    records = [r for files in pools.pool_files(demo_pools.pools_dir).values() for r in read_records(files)][:6]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"id": r["id"], "context": r["text"][:r["completion_start"]],
                                            "continuation": r["text"][r["completion_start"]:]}) + "\n"
                                for r in records))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "completion_nll.yaml").write_text(
        "task: nemotron_completion_nll\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {requests}\n"
        "test_split: test\n"
        "output_type: loglikelihood\n"
        'doc_to_text: "{{context}}"\n'
        'doc_to_target: "{{continuation}}"\n'
        'target_delimiter: ""\n'
        "metric_list:\n  - metric: acc\n"
    )
    results = simple_evaluate(
        model="hf", model_args={"pretrained": str(tiny_checkpoint), "dtype": "float32"},
        tasks=["nemotron_completion_nll"], task_manager=TaskManager(include_path=str(tasks)),
        batch_size=2, log_samples=True, device="cpu",
    )
    samples = results["samples"]["nemotron_completion_nll"]
    assert len(samples) == len(records)
    for sample in samples:
        loglikelihood = sample["resps"][0][0][0]
        mine = ours[sample["doc"]["id"]]
        assert -mine["nll"] * mine["completion_tokens"] == pytest.approx(loglikelihood, rel=1e-5, abs=1e-4)


def test_selection_per_pool_and_resume(tmp_path, demo_pools, tiny_checkpoint, capsys):
    first = run_score(tmp_path / "a", demo_pools, tiny_checkpoint, device="cpu")
    chunks, device = first.metrics["chunks"], first.metrics["device"]
    assert device == "cpu" and first.config["device"] == "cpu"
    assert re.search(rf"post_training/score/\w+: {chunks}/{chunks} items \| records {first.num_scored}, "
                     r"tokens [\d,]+ \([\d,]+/s\), too_long 0", capsys.readouterr().err)
    pool_ids = {r["id"] for f in pools.pool_files(demo_pools.pools_dir).values() for r in read_records(f)}
    assert first.num_scored == len(pool_ids)
    scores = read_records(first.scores_path)
    assert all(s["nll"] > 0 and s["completion_tokens"] > 0 for s in scores)
    selected = read_records(first.selected_path)
    assert {p for r in selected for p in r["pools"]} <= {"tool_use", "proof", "multi_turn"}
    for counts in first.metrics["per_pool"].values():
        assert 0 < counts["selected"] <= counts["candidates"]
    before = ((tmp_path / "a" / "scores.parquet").read_bytes(),
              (tmp_path / "a" / "selected.parquet").read_bytes())
    # A killed run: one chunk lost its output and receipt; the re-run scores only that chunk.
    work = next((tmp_path / "a" / "work").iterdir())
    (work / "receipts" / "chunk_00001.json").unlink()
    (work / "chunk_00001.parquet").write_bytes(b"half")
    again = run_score(tmp_path / "a", demo_pools, tiny_checkpoint, device="cpu")
    assert again.metrics["chunks_resumed"] == again.metrics["chunks"] - 1
    assert re.search(r"post_training/score/\w+: 1/1 items \| records 4,", capsys.readouterr().err)
    assert again.digest == first.digest
    after = ((tmp_path / "a" / "scores.parquet").read_bytes(), (tmp_path / "a" / "selected.parquet").read_bytes())
    assert after == before


def test_select_by_score_rules():
    nll = np.array([0.5, 3.0, 1.0, 9.0, 2.0])
    assert select_by_score(nll, "top_k", top_k=2) == [0, 2]
    assert select_by_score(nll, "top_k", top_k=2, prefer="high_nll") == [1, 3]
    assert select_by_score(nll, "quantile", quantiles=(0.0, 0.75)) == [0, 1, 2, 4]
    assert select_by_score(nll, "quantile", quantiles=(0.25, 1.0)) == [1, 2, 3, 4]


@pytest.mark.slow
def test_default_reference_model_smollm2_scores_offline(tmp_path, demo_dataset):
    # One small pool (4 records, ~1,300 tokens, two datasets): loading SmolLM2 is the point, not scoring all 18.
    few = pools.main(pools.Config(dataset_path=demo_dataset.path, output_dir=tmp_path / "pools", pools=("multi_turn",)))
    scored = score.main(score.Config(pools_path=few.path, output_dir=tmp_path / "score", top_k=2, selection="top_k"))
    assert scored.reference_model == "smollm2"
    assert scored.num_scored == 4 and scored.metrics["too_long"] == 0
    nll = [s["nll"] for s in read_records(scored.scores_path)]
    # A trained 135M model predicts Harmony completions far better than chance (ln 49152 = 10.8 nats).
    assert all(math.isfinite(x) for x in nll) and 0.2 < float(np.mean(nll)) < 5.0


# llama.cpp's names for the Llama tensors of one layer, and the Hugging Face names they load as.
GGUF_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "ffn_down": "mlp.down_proj",
                    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "attn_q": "self_attn.q_proj",
                    "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj"}


@pytest.mark.slow
def test_smollm2_is_converted_once_into_the_cache_with_the_gguf_weights_bit_for_bit(capfd, tmp_path, monkeypatch):
    """The converted folder (made by the test above, or by another worker's server, whichever loaded SmolLM2
    first: conftest.py points NEMOTRON_CACHE at the session's shared folder) holds the GGUF's tensors as the
    `gguf` package itself de-quantizes them, every one, and its tokenizer the GGUF's vocabulary."""
    import gguf

    from nemotron.models.reference import SMOLLM2, cache_root, load_reference_model, smollm2_folder, smollm2_gguf

    model, tokenizer = load_reference_model(SMOLLM2)
    folder = smollm2_folder(convert=False)
    assert folder is not None and folder.parent == cache_root(), folder
    made = (folder / "model.safetensors").stat().st_mtime_ns
    capfd.readouterr()
    assert load_reference_model(SMOLLM2)[0].config == model.config
    assert "converting" not in capfd.readouterr().err and (folder / "model.safetensors").stat().st_mtime_ns == made

    reader = gguf.GGUFReader(smollm2_gguf())
    heads, kv_heads = model.config.num_attention_heads, model.config.num_key_value_heads
    state = model.state_dict()
    for tensor in reader.tensors:
        kind, _, rest = tensor.name.partition(".")
        if kind == "blk":
            layer, name, _ = rest.split(".")
            hf = f"model.layers.{layer}.{GGUF_LAYER_NAMES[name]}.weight"
        else:
            hf = {"token_embd": "model.embed_tokens.weight", "output_norm": "model.norm.weight"}[kind]
        theirs = torch.tensor(gguf.quants.dequantize(tensor.data, tensor.tensor_type))
        if hf.endswith(("q_proj.weight", "k_proj.weight")):  # llama.cpp interleaves each head's rotary halves
            n = heads if "q_proj" in hf else kv_heads
            theirs = theirs.reshape(n, theirs.shape[0] // n // 2, 2, -1).transpose(1, 2).reshape(theirs.shape)
        assert torch.equal(state[hf], theirs), f"{tensor.name} -> {hf}"
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])  # tied, as in the GGUF
    field = reader.fields["tokenizer.ggml.tokens"]
    assert tokenizer.convert_ids_to_tokens(list(range(len(field.data)))) == [
        bytes(field.parts[i]).decode() for i in field.data]

    # A damaged copy (a disk that filled up, a copy cut short) is one error line saying how to mend it.
    shutil.copytree(folder, tmp_path / "cache" / folder.name)
    weights = tmp_path / "cache" / folder.name / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    monkeypatch.setenv("NEMOTRON_CACHE", str(tmp_path / "cache"))
    with pytest.raises(NemotronError, match=f"delete its converted copy under {re.escape(str(tmp_path / 'cache'))} "
                                            "and it is made again"):
        load_reference_model(SMOLLM2)


def test_an_unwritable_cache_is_one_clear_error_before_converting(tmp_path, monkeypatch):
    from nemotron.models.reference import SMOLLM2, load_reference_model

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("NEMOTRON_CACHE", str(blocker / "cache"))
    with pytest.raises(NemotronError, match=r"cannot write its converted copy into .*a_file/cache: set NEMOTRON_CACHE"):
        load_reference_model(SMOLLM2)


# --- embedding-based selection ------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored(tmp_path_factory, demo_pools, tiny_checkpoint):
    return run_score(tmp_path_factory.mktemp("scored"), demo_pools, tiny_checkpoint, quantiles=(0.0, 1.0))


def test_minilm_embeddings_are_normalized_and_meaningful():
    from nemotron.models.embeddings import embed

    vectors = embed(["What is the weather in Lyon?", "How is the weather in Paris today?",
                     "Prove that the square of a real number is non-negative."])
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_embed_select_keeps_a_diverse_subset(tmp_path, scored):
    from nemotron.recipes.post_training_data import embed_select

    chosen = embed_select.main(embed_select.Config(scored_path=scored.path, output_dir=tmp_path, target_size=5,
                                                   device="cpu"))
    assert chosen.metrics["device"] == "cpu"
    selected = read_records(chosen.selected_path)
    report = json.loads(chosen.report_path.read_text())
    assert len(selected) == chosen.num_selected == 5
    assert report["tool_call_coverage"] == 1.0 and report["unique_view_share"] > 0.9
    assert np.load(chosen.embeddings_path).shape == (scored.num_selected, 384)
    # Farthest-first picks different behaviours: not five records of one signature.
    from nemotron.data_prep.post_training.selection import behaviour_signature

    assert len({behaviour_signature(r["messages"]) for r in selected}) >= 2
    again = embed_select.main(embed_select.Config(scored_path=scored.path, output_dir=tmp_path / "again",
                                                  target_size=5, device="cpu"))
    assert again.digest == chosen.digest


def test_collapsed_view_and_nan_embeddings_stop_the_step(tmp_path, scored):
    import shutil

    from transformers import BertConfig, BertModel

    from nemotron.models.embeddings import minilm_folder
    from nemotron.recipes.post_training_data import embed_select

    with pytest.raises(NemotronError, match="embedding view is collapsed"):
        embed_select.main(embed_select.Config(scored_path=scored.path, output_dir=tmp_path / "a",
                                              min_unique_share=1.01))
    broken = tmp_path / "broken"  # a real encoder folder whose weights hold NaN: MiniLM's tokenizer, a NaN BERT
    broken.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(minilm_folder() / name, broken / name)
    model = BertModel(BertConfig(vocab_size=30522, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32))
    with torch.no_grad():
        model.embeddings.word_embeddings.weight.fill_(float("nan"))
    model.save_pretrained(broken)
    with pytest.raises(NemotronError, match="embedding of text 0 is not finite"):
        embed_select.main(embed_select.Config(scored_path=scored.path, output_dir=tmp_path / "b",
                                              embedding_model=str(broken)))
    assert not (tmp_path / "b" / "metadata.json").exists()


def test_orchestrator_end_to_end_with_lineage_to_the_raw_files(tmp_path, tiny_checkpoint, capsys):
    import subprocess
    import sys

    import nemotron.recipes.post_training_data.__main__ as pipeline

    config = pipeline.Config(output_dir=tmp_path, score=score.Config(reference_model=str(tiny_checkpoint)))
    made = pipeline.main(config)
    assert made["diverseselection"].num_selected > 0
    again = pipeline.main(config)  # everything up to date: every step is skipped
    assert {k: a.digest for k, a in again.items()} == {k: a.digest for k, a in made.items()}
    assert capsys.readouterr().err.count("[skip]") == 4
    lineage = subprocess.run([sys.executable, "-m", "nemotron.artifact", "lineage", str(tmp_path / "embed_select")],
                             capture_output=True, text=True, check=True).stdout
    for family in ("math", "proofs", "science", "agentic", "chat"):
        assert f"demo/{family}/" in lineage
