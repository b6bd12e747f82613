"""`nemotron.trace`: the spans of a text that occur word for word in a model's training data.

On real data made by the real builders: a nano2 stage-0 dataset of two plays (Shakespeare's scenes in
Megatron bin/idx shards) and the stage-1 SFT dataset (chatterbot conversations), each under a checkpoint
artifact that records it as its input, the way a training step does. The suffix array is checked
against brute force on seeded random token arrays.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

from nemotron.artifact.lineage import verify_tree
from nemotron.data_prep.conversations import read_conversations
from nemotron.data_prep.indexed import IndexedReader
from nemotron.data_prep.tokenizer import load_tokenizer
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, SFTCheckpoint
from nemotron.trace import Tracer, find_spans
from nemotron.trace.corpora import Dataset, training_datasets
from nemotron.trace.index import load_or_build
from nemotron.trace.suffix_array import SEPARATOR, longest_match, suffix_array

ABSENT = "The zebra's quantum xylophone hums marmalade sonatas to seventeen sleepy lighthouses at dawn."


# ---------------------------------------------------------------------------------------------------
# The suffix array against brute force
# ---------------------------------------------------------------------------------------------------


def random_tokens(seed: int) -> np.ndarray:
    """A short array over a tiny vocabulary (many repeats), with document separators here and there."""
    rng = random.Random(seed)
    n = rng.randint(1, 60)
    return np.array([SEPARATOR if rng.random() < 0.08 else rng.randint(0, rng.choice([1, 2, 4]))
                     for _ in range(n)], dtype=np.int32)


def brute_longest(tokens: list[int], query: list[int]) -> tuple[int, set[int]]:
    """The longest prefix of `query` found in `tokens` (never matching a separator), and where it starts."""
    for length in range(len(query), 0, -1):
        starts = {i for i in range(len(tokens) - length + 1) if tokens[i:i + length] == query[:length]}
        if starts:
            return length, starts
    return 0, set(range(len(tokens)))


@pytest.mark.parametrize("seed", range(200))
def test_suffix_array_agrees_with_brute_force(seed):
    tokens = random_tokens(seed)
    as_list = tokens.tolist()
    sa = suffix_array(tokens)
    expected = sorted(range(len(as_list)), key=lambda i: as_list[i:])  # Python compares lists as suffixes sort
    assert sa.tolist() == expected, f"seed {seed}: suffix array of {as_list} is {sa.tolist()}, expected {expected}"

    rng = random.Random(f"query/{seed}")
    for _ in range(5):
        start = rng.randrange(len(as_list))
        query = [t for t in as_list[start:start + rng.randint(1, 12)] if t != SEPARATOR] or [0]
        if rng.random() < 0.5:  # a query that leaves the data part-way
            query.insert(rng.randrange(len(query) + 1), 9)
        length, lo, hi = longest_match(tokens, sa, np.array(query))
        want_length, want_starts = brute_longest(as_list, query)
        assert (length, set(sa[lo:hi].tolist())) == (want_length, want_starts), (
            f"seed {seed}: longest match of {query} in {as_list}")


# ---------------------------------------------------------------------------------------------------
# Real datasets under real checkpoint artifacts
# ---------------------------------------------------------------------------------------------------


def checkpoint_on(cls, root, tokenizer_dir, inputs):
    """A checkpoint artifact that records `inputs` as what it was trained on, with a real (untrained) nano2
    model and the dataset's tokenizer in its model folder: what a training step saves (training would
    only change the weights, which tracing never reads)."""
    from nemotron.models.nano2 import build_config, build_model

    model_dir = root / "model"
    shutil.copytree(tokenizer_dir, model_dir)
    build_model(build_config("tiny", len(load_tokenizer(model_dir))), seed=0).save_pretrained(str(model_dir))
    (root / "metrics.jsonl").write_text('{"loss": 1.0, "step": 1}\n')
    return cls(path=root, model_dir=model_dir, metrics_path=root / "metrics.jsonl", training_loss=1.0,
               validation_loss=None, steps=1, inputs=inputs).save()


@pytest.fixture(scope="module")
def plays_checkpoint(nano3_two_plays, tmp_path_factory):
    """A base checkpoint trained (as its lineage says) on the stage-0 shards of Hamlet and Macbeth."""
    return checkpoint_on(PretrainCheckpoint, tmp_path_factory.mktemp("plays_ckpt"), nano3_two_plays.tokenizer_dir,
                         [nano3_two_plays])


@pytest.fixture(scope="module")
def sft_checkpoint(tiny_sft_dataset, tiny_base_checkpoint, tmp_path_factory):
    """A chat checkpoint fine-tuned (as its lineage says) from the base checkpoint on the SFT dataset."""
    return checkpoint_on(SFTCheckpoint, tmp_path_factory.mktemp("sft_ckpt"), tiny_sft_dataset.tokenizer_dir,
                         [tiny_sft_dataset, tiny_base_checkpoint])


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("trace_index")


def test_a_shakespeare_line_is_found_in_its_pretraining_document(plays_checkpoint, nano3_two_plays, index_dir):
    tokenizer = load_tokenizer(nano3_two_plays.tokenizer_dir)
    shard = IndexedReader(nano3_two_plays.train_prefixes[0])
    document = 3
    lines = [line.strip() for line in tokenizer.decode(shard[document].tolist()).splitlines()]
    line = max(lines, key=len)  # the document's longest line of verse or prose
    assert len(tokenizer(line, add_special_tokens=False)["input_ids"]) >= 10, line

    spans = find_spans(plays_checkpoint.path, line, index_dir=index_dir, max_sources=50)

    assert len(spans) == 1, spans
    span = spans[0]
    assert span.num_tokens >= len(tokenizer(line, add_special_tokens=False)["input_ids"]) - 1  # all but maybe the first
    assert span.sources[0].dataset == str(nano3_two_plays.path)
    shard_name = str(nano3_two_plays.train_prefixes[0].relative_to(nano3_two_plays.path))
    where = [(s.document["shard"], s.document["document"]) for s in span.sources]
    assert (shard_name, document) in where, where
    source = span.sources[where.index((shard_name, document))]
    doc_tokens = shard[document].tolist()
    assert doc_tokens[source.position:source.position + span.num_tokens] == \
        tokenizer(line, add_special_tokens=False)["input_ids"][span.start:span.end]
    assert span.text.strip() in source.context.replace("«", "").replace("»", "")
    assert line.endswith(span.text.strip()) or span.text.strip() in line


def test_a_training_answer_is_found_naming_its_conversation(sft_checkpoint, tiny_sft_dataset, index_dir):
    tokenizer = load_tokenizer(tiny_sft_dataset.tokenizer_dir)
    conversations = read_conversations(tiny_sft_dataset.train_conversations)
    answers = [(c["id"], m["content"]) for c in conversations for m in c["messages"] if m["role"] == "assistant"]
    conversation, answer = max(answers, key=lambda a: len(a[1]))
    assert len(tokenizer(answer, add_special_tokens=False)["input_ids"]) >= 8, answer
    holding = {c["id"] for c in conversations if any(answer in m["content"] for m in c["messages"])}

    spans = Tracer(sft_checkpoint.path, index_dir).find_spans(answer, max_sources=100)

    assert len(spans) == 1 and (spans[0].start, spans[0].end) == (0, len(tokenizer(answer, add_special_tokens=False)
                                                                         ["input_ids"])), spans
    named = {s.document["conversation"] for s in spans[0].sources if "conversation" in s.document}
    assert conversation in named, (conversation, named)
    assert named <= holding  # every conversation named really holds the answer
    assert spans[0].describe().startswith(f"copied ({spans[0].num_tokens} tokens, from sftdataset conversation ")


def test_a_copied_span_is_found_mid_way_through_other_text(sft_checkpoint, tiny_sft_dataset, index_dir):
    conversations = read_conversations(tiny_sft_dataset.train_conversations)
    answer = max((m["content"] for c in conversations for m in c["messages"] if m["role"] == "assistant"), key=len)
    text = f"{ABSENT} {answer} {ABSENT}"

    spans = Tracer(sft_checkpoint.path, index_dir).find_spans(text)

    assert [span.text.strip() for span in spans] == [answer.strip()], spans
    assert text[spans[0].char_start:spans[0].char_end].strip() == answer.strip()


def test_text_absent_from_the_training_data_finds_nothing(sft_checkpoint, plays_checkpoint, index_dir):
    assert Tracer(sft_checkpoint.path, index_dir).find_spans(ABSENT) == []
    assert Tracer(plays_checkpoint.path, index_dir).find_spans(ABSENT) == []


def test_the_index_is_built_once_and_reused_and_rebuilt_for_another_digest(plays_checkpoint, nano3_two_plays,
                                                                           tmp_path):
    (dataset,) = training_datasets(plays_checkpoint.path)
    first = load_or_build(dataset, tmp_path)
    folder = tmp_path / dataset.digest
    receipt = json.loads((folder / "receipt.json").read_text())
    stamp = (folder / "suffix_array.npy").stat().st_mtime_ns

    again = load_or_build(dataset, tmp_path)

    assert (first.built, again.built) == (True, False)
    assert (folder / "suffix_array.npy").stat().st_mtime_ns == stamp
    assert receipt["digest"] == nano3_two_plays.digest
    assert receipt["num_tokens"] == nano3_two_plays.num_train_tokens
    assert receipt["build_seconds"] > 0 and receipt["peak_memory_bytes"] > 0
    assert np.array_equal(again.suffix_array, first.suffix_array)

    remade = Dataset(dataset.path, dataset.type, "0" * 64, dataset.metadata)  # what a re-made dataset records
    assert load_or_build(remade, tmp_path).built
    assert (tmp_path / ("0" * 64) / "receipt.json").is_file()
    verify_tree(nano3_two_plays.path)  # the index lives outside the artifact: its digest still holds


def test_the_default_index_folder_is_beside_the_dataset_and_keeps_it_verified(sft_checkpoint, tiny_sft_dataset,
                                                                             monkeypatch):
    monkeypatch.delenv("NEMOTRON_TRACE_INDEX_DIR", raising=False)
    (dataset,) = [d for d in training_datasets(sft_checkpoint.path) if d.type == "sftdataset"]
    index = load_or_build(dataset)
    assert (tiny_sft_dataset.path.parent / ".trace-index" / dataset.digest / "receipt.json").is_file()
    assert index.receipt["num_documents"] > 0
    verify_tree(sft_checkpoint.path)


def test_bad_input_is_one_clear_error(tiny_base_checkpoint, sft_checkpoint, index_dir, tmp_path):
    with pytest.raises(NemotronError, match="no training data in its lineage"):
        Tracer(tiny_base_checkpoint.path, tmp_path)
    with pytest.raises(NemotronError, match="not a checkpoint artifact"):
        Tracer(tmp_path, tmp_path)
    with pytest.raises(NemotronError, match="min_tokens is 0"):
        Tracer(sft_checkpoint.path, index_dir).find_spans("text", min_tokens=0)


@pytest.mark.slow
def test_the_command_prints_the_spans_as_json(sft_checkpoint, tiny_sft_dataset, index_dir):
    conversations = read_conversations(tiny_sft_dataset.train_conversations)
    conversation, answer = max(((c["id"], m["content"]) for c in conversations for m in c["messages"]
                                if m["role"] == "assistant"), key=lambda a: len(a[1]))
    done = subprocess.run([sys.executable, "-m", "nemotron.trace", str(sft_checkpoint.path), answer,
                           "--index-dir", str(index_dir), "--max-sources", "100"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["trace"]
    assert conversation in {s["document"].get("conversation") for s in trace["spans"][0]["sources"]}
    assert "copied (" in done.stderr

    bad = subprocess.run([sys.executable, "-m", "nemotron.trace", str(index_dir), "hello"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().startswith("error: ") and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_an_answer_from_the_report_card_names_the_training_conversation(nano2_run):
    """The done-when check: the DPO model's greedy answer, as the report card shows it, traced with the
    command names the stage-1 training conversation that holds it (and the report card marks it)."""
    samples = json.loads((nano2_run.out / "stage2_alignment" / "evaluation" / "samples.json").read_text())
    answer = samples[0]["completion"].strip()
    assert answer in nano2_run.report_text
    checkpoint = nano2_run.out / "stage2_alignment" / "training"
    tracer = Tracer(checkpoint)
    span = tracer.copied(answer)
    assert span is not None, answer
    done = subprocess.run([sys.executable, "-m", "nemotron.trace", str(checkpoint), answer,
                           "--min-tokens", str(span.num_tokens), "--max-sources", "1000"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    sources = json.loads(done.stdout)["trace"]["spans"][0]["sources"]
    named = {s["document"]["conversation"] for s in sources if s["dataset_type"] == "sftdataset"}
    conversations = read_conversations(nano2_run.out / "stage1_sft" / "data_curation" / "train_conversations.jsonl")
    holding = {c["id"] for c in conversations if any(span.text in m["content"] for m in c["messages"])}
    assert named and named <= holding, (named, holding)
    verify = subprocess.run([sys.executable, "-m", "nemotron.artifact", "verify", str(checkpoint)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr  # the indexes beside the datasets changed no digest
