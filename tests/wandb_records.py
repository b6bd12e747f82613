"""Read an offline W&B run back: the records of its `run-<id>.wandb` file (tests/ is on sys.path).

The file is W&B's record log: a 7-byte header (":W&B", magic, version), then 32 KiB blocks of chunks,
each a 7-byte header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last) and a piece of one
serialized `wandb_internal_pb2.Record`; a block's tail too short for a chunk header is padding.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

BLOCK = 32768


def run_records(run_file: Path) -> list:
    data, position, pieces, records = Path(run_file).read_bytes(), 7, b"", []
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run log"
    while position + 7 <= len(data):
        left = BLOCK - position % BLOCK
        if left < 7:
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        pieces += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pieces)
            records.append(record)
            pieces = b""
    return records


def history(run_dir: Path) -> list[dict]:
    """Every history row of the one offline run under `run_dir`/wandb, in order, as {key: value}."""
    (run_file,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for record in run_records(run_file) if record.WhichOneof("record_type") == "history"]


def step_metrics(run_dir: Path) -> dict[str, str]:
    """{metric: the metric W&B plots it against} from the run's define_metric records."""
    (run_file,) = Path(run_dir).glob("wandb/offline-run-*/run-*.wandb")
    return {record.metric.name or record.metric.glob_name: record.metric.step_metric
            for record in run_records(run_file) if record.WhichOneof("record_type") == "metric"}
