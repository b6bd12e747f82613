"""Our bin/idx writer vs Megatron-Core's IndexedDatasetBuilder on the same token streams.

Writes 200,000 seeded random documents (lengths 1..256 tokens, ~26M tokens) with both writers,
checks the .bin and .idx bytes are identical, and prints both times and the ratio theirs/ours
(> 1.0 means ours is faster). Two input forms are timed, since both occur in practice: Python
lists of ints (what a tokenizer returns; Megatron's preprocess_data.py passes these to
`add_document`) and numpy arrays.

Both writers are single-threaded, so each is timed by the CPU seconds of this process
(`time.process_time`, file writes included): on a shared machine wall-clock time mostly measures the
other users, CPU time does not. Wall-clock seconds are printed beside it.

Where the time goes for lists: both writers must turn every Python int into a machine integer
(checked: a float or an out-of-range id is refused). Megatron pays a numpy call, a copy and a file
write per document; ours converts each list straight into one growing `array.array` of the token
dtype (`fromlist`: one C loop, no intermediate list; measured 1.6x faster than extending a list and
converting it later) and writes once per 1M tokens. That per-int conversion is the floor for lists
(a per-batch `add_documents` API was tried and measured no faster); arrays skip it.

    python benchmarks/bench_indexed_writer.py [--documents 200000] [--max-length 256] [--dtype uint16] [--repeat 3]
    python benchmarks/bench_indexed_writer.py --quick     # 2,000 documents, once
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


def timed(write):
    """(CPU seconds, wall seconds) of `write()`."""
    cpu, wall = time.process_time(), time.perf_counter()
    write()
    return time.process_time() - cpu, time.perf_counter() - wall


def write_ours(prefix: Path, documents, dtype) -> tuple[float, float]:
    def write():
        with IndexedWriter(prefix, dtype) as writer:
            for document in documents:
                writer.add_document(document)

    return timed(write)


def write_theirs(prefix: Path, documents, dtype) -> tuple[float, float]:
    def write():
        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype.type)  # it wants np.uint16, not a dtype
        for document in documents:
            builder.add_document(document, [len(document)])  # as preprocess_data.py calls it
        builder.finalize(f"{prefix}.idx")

    return timed(write)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=200_000)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--dtype", choices=["uint16", "int32"], default="uint16")
    parser.add_argument("--repeat", type=int, default=3, help="runs per writer; the fastest (least CPU) counts")
    parser.add_argument("--quick", action="store_true", help="2,000 documents, once: checks it runs")
    args = parser.parse_args()
    if args.quick:
        args.documents, args.repeat = 2000, 1
    dtype = np.dtype(args.dtype)

    arrays = make_documents(args.documents, args.max_length, dtype)
    lists = [array.tolist() for array in arrays]
    tokens = sum(len(a) for a in arrays)
    print(f"{args.documents} documents, {tokens / 1e6:.1f}M tokens, {dtype}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        for form, documents in (("python lists", lists), ("numpy arrays", arrays)):
            ours_prefix, theirs_prefix = Path(tmp) / "ours", Path(tmp) / "theirs"
            theirs = min(write_theirs(theirs_prefix, documents, dtype) for _ in range(args.repeat))
            ours = min(write_ours(ours_prefix, documents, dtype) for _ in range(args.repeat))
            for suffix in (".bin", ".idx"):
                ours_bytes = Path(f"{ours_prefix}{suffix}").read_bytes()
                if ours_bytes != Path(f"{theirs_prefix}{suffix}").read_bytes():
                    sys.exit(f"{suffix} bytes differ between the writers ({form})")
            print(f"{form}: megatron {theirs[0]:.2f} CPU s ({theirs[1]:.2f} s wall), ours {ours[0]:.2f} CPU s "
                  f"({ours[1]:.2f} s wall), bytes identical", file=sys.stderr)
            print(f"{form}: ratio theirs/ours = {theirs[0] / ours[0]:.2f}x (CPU time)")


if __name__ == "__main__":
    main()
