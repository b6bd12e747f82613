"""Our bin/idx writer and reader against the real Megatron-Core implementation, both directions.

Megatron-Core is a test dependency (pyproject `test` extra); it installs CPU-only, so nothing here
skips: if these tests fail, Megatron cannot train on our shards.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
from megatron.core.tokenizers import MegatronTokenizer

from nemotron.data_prep.indexed import IndexedReader, IndexedWriter, best_dtype
from nemotron.data_prep.tokenizer import EOS_ID, PAD_ID, train_tokenizer
from nemotron.errors import NemotronError

DTYPES = [np.uint16, np.int32]


def random_documents(count: int, high: int, seed: int = 0) -> list[np.ndarray]:
    """Documents of random length (including empty ones), each ending with EOS like real shards."""
    rng = np.random.default_rng(seed)
    return [np.append(rng.integers(5, high, rng.integers(0, 60)), EOS_ID) for _ in range(count)]


def write_ours(prefix, documents, dtype) -> None:
    with IndexedWriter(prefix, dtype) as writer:
        for document in documents:
            writer.add_document(document.tolist())  # plain lists, as a tokenizer returns them


@pytest.mark.parametrize("dtype", DTYPES)
def test_megatron_reads_our_files_exactly(tmp_path, dtype):
    high = 60_000 if dtype == np.uint16 else 2_000_000
    documents = random_documents(500, high)
    write_ours(tmp_path / "ours", documents, dtype)

    theirs = IndexedDataset(str(tmp_path / "ours"))
    assert len(theirs) == len(documents)
    assert theirs.index.dtype == dtype
    for i, document in enumerate(documents):
        np.testing.assert_array_equal(theirs[i], document)
    np.testing.assert_array_equal(theirs.document_indices, np.arange(len(documents) + 1))

    # Stronger still: Megatron's own builder writes the very same bytes for the same documents.
    builder = IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=dtype)
    for document in documents:
        builder.add_item(torch.from_numpy(document))
        builder.end_document()
    builder.finalize(str(tmp_path / "theirs.idx"))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_we_read_files_written_by_megatron(tmp_path, dtype):
    rng = np.random.default_rng(1)
    builder = IndexedDatasetBuilder(str(tmp_path / "m.bin"), dtype=dtype)
    sequences = []
    # Megatron documents may hold several sequences (e.g. one per sentence): three per document here.
    for _ in range(50):
        for _ in range(3):
            sequence = rng.integers(0, 60_000, rng.integers(1, 30))
            sequences.append(sequence)
            builder.add_item(torch.from_numpy(sequence))
        builder.end_document()
    builder.finalize(str(tmp_path / "m.idx"))

    reader = IndexedReader(tmp_path / "m")
    assert reader.dtype == dtype and len(reader) == 150 and reader.num_documents == 50
    for i, sequence in enumerate(sequences):
        np.testing.assert_array_equal(reader[i], sequence)
    np.testing.assert_array_equal(reader.document_indices, np.arange(0, 151, 3))
    np.testing.assert_array_equal(reader.sequence_lengths, [len(s) for s in sequences])
    np.testing.assert_array_equal(reader[-1], sequences[-1])


@pytest.fixture(scope="module")
def megatron_tokenizer(tmp_path_factory):
    """Megatron's own Hugging Face tokenizer wrapper around a tokenizer folder we trained."""
    texts = ["the quick brown fox jumps over the lazy dog", "to be or not to be"] * 50
    folder = train_tokenizer(texts, 300, tmp_path_factory.mktemp("tok") / "tokenizer")
    return MegatronTokenizer.from_pretrained(str(folder), metadata_path={"library": "huggingface"})


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpt_dataset_samples_are_windows_of_the_document_stream(tmp_path, dtype, megatron_tokenizer):
    assert (megatron_tokenizer.eod, megatron_tokenizer.pad) == (EOS_ID, PAD_ID)
    documents = random_documents(300, 300, seed=2)
    write_ours(tmp_path / "shard", documents, dtype)
    sequence_length = 32
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=sequence_length,
        blend=([str(tmp_path / "shard")], None),
        split="100,0,0",
        path_to_cache=str(tmp_path / "cache"),
        tokenizer=megatron_tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
    )
    train, _, _ = BlendedMegatronDatasetBuilder(GPTDataset, [None, None, None], lambda: True, config).build()

    # One epoch visits every document once, in the shuffled order of `document_index`; sample j is
    # tokens [j*L, j*L + L] of that concatenated stream (inputs, plus one extra token for labels).
    assert sorted(train.document_index.tolist()) == list(range(len(documents)))
    stream = np.concatenate([documents[d] for d in train.document_index])
    assert len(train) == (len(stream) - 1) // sequence_length
    for k in range(len(train)):
        sample, j = train[k], int(train.shuffle_index[k])
        window = stream[j * sequence_length : (j + 1) * sequence_length + 1]
        np.testing.assert_array_equal(sample["tokens"].numpy(), window[:-1])
        np.testing.assert_array_equal(sample["labels"].numpy(), window[1:])


def test_best_dtype_matches_megatron_threshold():
    assert best_dtype(2_000) == np.uint16
    assert best_dtype(65_499) == np.uint16
    assert best_dtype(65_500) == np.int32
    assert best_dtype(256_000) == np.int32


def test_empty_documents_and_empty_shard_round_trip(tmp_path):
    write_ours(tmp_path / "empty", [], np.uint16)
    reader = IndexedReader(tmp_path / "empty")
    assert len(reader) == 0 and reader.num_tokens == 0
    with IndexedWriter(tmp_path / "holes", np.uint16) as writer:
        for document in ([], [7, 8], []):
            writer.add_document(document)
    assert [r.tolist() for r in IndexedReader(tmp_path / "holes")] == [[], [7, 8], []]


@pytest.mark.parametrize(
    "document, message",
    [  # lists are checked as they arrive (naming the document), arrays when a block is written
        ([1, 70_000], r"document 1 for .*bad\.bin: a token id is not an integer that fits uint16"),
        ([1, -1], r"document 1 for .*bad\.bin: a token id is not an integer that fits uint16"),
        ([0.5, 1.5], r"document 1 for .*bad\.bin: a token id is not an integer that fits uint16"),
        (np.array([1, 70_000]), r"documents 0..1 for .*bad\.bin: token id 70000 does not fit uint16"),
    ],
)
def test_writer_refuses_tokens_it_would_store_wrongly(tmp_path, document, message):
    with pytest.raises(NemotronError, match=message):
        with IndexedWriter(tmp_path / "bad", np.uint16) as writer:
            writer.add_document([3, 4])
            writer.add_document(document)
    assert list(tmp_path.iterdir()) == []  # refused before anything became visible


def test_writer_refuses_non_integer_dtypes(tmp_path):
    with pytest.raises(NemotronError, match=r"document 0 for .*f\.bin is a 1-D float64 array"):
        IndexedWriter(tmp_path / "f", np.uint16).add_document(np.array([0.5, 1.5]))
    with pytest.raises(NemotronError, match="not supported"):
        IndexedWriter(tmp_path / "g", np.float32)


def test_writer_is_atomic(tmp_path):
    with pytest.raises(RuntimeError):
        with IndexedWriter(tmp_path / "shard", np.uint16) as writer:
            writer.add_document([1, 2, 3])
            raise RuntimeError("crash mid-shard")
    assert list(tmp_path.iterdir()) == []  # no final files, no temp files

    writer = IndexedWriter(tmp_path / "shard", np.uint16)
    writer.add_document([1, 2, 3])
    assert not (tmp_path / "shard.bin").exists()  # nothing visible before finalize
    writer.finalize()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard.bin", "shard.idx"]


def test_reader_names_the_file_for_missing_truncated_or_corrupt_shards(tmp_path):
    write_ours(tmp_path / "s", random_documents(20, 1000), np.uint16)
    with pytest.raises(NemotronError, match="not found: .*nothere.idx"):
        IndexedReader(tmp_path / "nothere")

    bin_bytes, idx_bytes = (tmp_path / "s.bin").read_bytes(), (tmp_path / "s.idx").read_bytes()
    cases = {
        "s.bin": [(bin_bytes[:-2], r"s\.bin has .* bytes but its index describes")],
        "s.idx": [
            (b"NOTANIDX" + idx_bytes[8:], r"s\.idx is not a Megatron indexed dataset index"),
            (idx_bytes[:-8], r"corrupt index .*s\.idx: .* bytes, but its header"),
            (idx_bytes[:20], r"corrupt index .*s\.idx: only 20 bytes"),
            # Corrupt the first sequence length: the pointers no longer follow the lengths.
            (idx_bytes[:34] + b"\xff\x00\x00\x00" + idx_bytes[38:], r"s\.idx: it has sequence pointers"),
        ],
    }
    for name, variants in cases.items():
        for broken, message in variants:
            (tmp_path / name).write_bytes(broken)
            with pytest.raises(NemotronError, match=message):
                IndexedReader(tmp_path / "s")
        (tmp_path / "s.bin").write_bytes(bin_bytes)
        (tmp_path / "s.idx").write_bytes(idx_bytes)
    assert len(IndexedReader(tmp_path / "s")) == 20
