"""Our bin/idx writer vs Megatron-Core's IndexedDatasetBuilder on the same token streams.

Writes 200,000 seeded random documents (lengths 1..256 tokens, ~26M tokens) with both writers,
checks the .bin and .idx bytes are identical, and prints both times and the ratio theirs/ours
(> 1.0 means ours is faster). Two input forms are timed, since both occur in practice: Python
lists of ints (what a tokenizer returns; Megatron's preprocess_data.py passes these to
`add_document`) and numpy arrays; ours is timed one `add_document` call per document and with
`add_documents` per batch of 512 (one tokenizer batch, as `shards.py` writes).

Where the time goes for lists: both writers must turn every Python int into a machine integer
(~10-25 ns each); Megatron pays it per document plus a numpy call and a file write per document,
ours once per 1M tokens. That conversion is the floor for lists; arrays skip it.

    python benchmarks/bench_indexed_writer.py [--documents 200000] [--max-length 256] [--dtype uint16]
"""

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

warnings.filterwarnings("ignore")  # megatron-core warns that Apex/Transformer Engine are missing
from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder  # noqa: E402

from nemotron.data_prep.indexed import IndexedWriter  # noqa: E402


def make_documents(count: int, max_length: int, dtype: np.dtype, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, max_length + 1, count)
    tokens = rng.integers(0, min(np.iinfo(dtype).max, 2**31 - 1), int(lengths.sum()), dtype=np.int64)
    return np.split(tokens, np.cumsum(lengths)[:-1])


def write_ours(prefix: Path, documents, dtype) -> float:
    start = time.perf_counter()
    with IndexedWriter(prefix, dtype) as writer:
        for document in documents:
            writer.add_document(document)
    return time.perf_counter() - start


def write_ours_batched(prefix: Path, documents, dtype, batch: int = 512) -> float:
    start = time.perf_counter()
    with IndexedWriter(prefix, dtype) as writer:
        for first in range(0, len(documents), batch):
            writer.add_documents(documents[first : first + batch])
    return time.perf_counter() - start


def write_theirs(prefix: Path, documents, dtype) -> float:
    start = time.perf_counter()
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype.type)  # it wants np.uint16, not a dtype
    for document in documents:
        builder.add_document(document, [len(document)])  # as preprocess_data.py calls it
    builder.finalize(f"{prefix}.idx")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--dtype", choices=["uint16", "int32"], default="uint16")
    args = parser.parse_args()
    dtype = np.dtype(args.dtype)

    arrays = make_documents(args.documents, args.max_length, dtype)
    lists = [array.tolist() for array in arrays]
    tokens = sum(len(a) for a in arrays)
    print(f"{args.documents} documents, {tokens / 1e6:.1f}M tokens, {dtype}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for form, documents in (("python lists", lists), ("numpy arrays", arrays)):
            theirs_prefix = Path(tmp) / "theirs"
            theirs = write_theirs(theirs_prefix, documents, dtype)
            for name, write in (("one call per document", write_ours), ("add_documents per 512", write_ours_batched)):
                ours_prefix = Path(tmp) / "ours"
                ours = write(ours_prefix, documents, dtype)
                for suffix in (".bin", ".idx"):
                    ours_bytes = Path(f"{ours_prefix}{suffix}").read_bytes()
                    if ours_bytes != Path(f"{theirs_prefix}{suffix}").read_bytes():
                        sys.exit(f"{suffix} bytes differ between the writers ({form}, {name})")
                print(f"{form}, {name}: megatron {theirs:.2f} s, ours {ours:.2f} s, bytes identical",
                      file=sys.stderr)
                print(f"{form}, {name}: ratio theirs/ours = {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()
