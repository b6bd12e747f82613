"""A blend from and to an S3-compatible server on 127.0.0.1 (moto's server mode), through s3fs.

What a user relies on at scale: the shards written to a bucket are the bytes a local run writes,
receipts still make a re-run skip finished shards, a damaged object is found by its checksum and
remade, and nothing but whole objects ever appears under the run's names.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.moto_server.threaded_moto_server")

from nemotron.data_prep import DataBlend, run_pretrain_pipeline, storage  # noqa: E402
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE  # noqa: E402
from nemotron.data_prep.tokenizer import train_tokenizer  # noqa: E402

pytestmark = pytest.mark.slow
BUCKET = "nemotron-test"
TEXTS = [f"Scene {n}. " + " ".join(f"word{(n * 7 + k) % 97}" for k in range(40 + n % 30)) for n in range(400)]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A real S3 API on loopback; credentials and endpoint through the standard AWS variables."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    saved = {key: os.environ.get(key) for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                 "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", AWS_ACCESS_KEY_ID="testing",
                      AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    fs, _ = storage.filesystem(f"s3://{BUCKET}")
    fs.mkdir(BUCKET)
    docs = "".join(json.dumps({"id": f"doc{n}", "text": text}) + "\n" for n, text in enumerate(TEXTS))
    fs.pipe_file(f"{BUCKET}/raw/docs.jsonl", docs.encode())
    local = tmp_path_factory.mktemp("local")
    (local / "docs.jsonl").write_text(docs)
    tokenizer = train_tokenizer(TEXTS, 600, local / "tokenizer", chat_template=NANO2_CHAT_TEMPLATE)
    yield {"fs": fs, "local": local, "tokenizer": tokenizer}
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def objects(fs, prefix: str) -> dict[str, bytes]:
    """Every object under s3://BUCKET/prefix, by key relative to the prefix."""
    fs.invalidate_cache()
    return {key.removeprefix(f"{BUCKET}/{prefix}/"): fs.cat_file(key) for key in sorted(fs.find(f"{BUCKET}/{prefix}"))}


def local_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_blend_from_s3_to_s3_writes_the_bytes_of_a_local_run_and_resumes(s3, tmp_path):
    fs = s3["fs"]
    remote = DataBlend(sources=[{"path": f"s3://{BUCKET}/raw/docs.jsonl", "name": "docs"}], split=[0.8, 0.2, 0.0])
    result = run_pretrain_pipeline(blend=remote, output_dir=f"s3://{BUCKET}/out", tokenizer=s3["tokenizer"],
                                   num_shards=3)
    local_blend = DataBlend(sources=[{"path": str(s3["local"] / "docs.jsonl"), "name": "docs"}], split=[0.8, 0.2, 0.0])
    local = run_pretrain_pipeline(blend=local_blend, output_dir=tmp_path / "out", tokenizer=s3["tokenizer"],
                                  num_shards=3)
    assert result.run_hash == local.run_hash and result.total_tokens == local.total_tokens > 0
    stored = objects(fs, "out")
    located = ("data_paths.json", "blend.json")  # they name where the shards are
    shards = {key: data for key, data in local_files(tmp_path / "out").items() if key not in located}
    assert {key: data for key, data in stored.items() if key not in located} == shards
    assert not any(Path(key).name.startswith(".") for key in stored)  # no temp object, ever
    assert result.data_paths["train"][0].startswith(f"s3://{BUCKET}/out/runs/{result.run_hash[:16]}/train/")

    # Damage one shard object: its receipt's checksum no longer holds, so that shard alone is remade.
    damaged = f"{result.output_dir}/train/shard_00001.bin".removeprefix("s3://")
    fs.pipe_file(damaged, b"half a shard")
    again = run_pretrain_pipeline(blend=remote, output_dir=f"s3://{BUCKET}/out", tokenizer=s3["tokenizer"],
                                  num_shards=3)
    assert again.statuses == {"written": 0, "redone": 1, "skipped": 2}
    assert {key: data for key, data in objects(fs, "out").items() if key not in located} == shards


def test_a_missing_object_or_backend_is_one_clear_error(s3, tmp_path):
    from nemotron.errors import NemotronError

    with pytest.raises(NemotronError, match="source not found: s3://nemotron-test/raw/nothing.jsonl"):
        DataBlend(sources=[{"path": f"s3://{BUCKET}/raw/nothing.jsonl"}]).read()
    with pytest.raises(NemotronError, match="gcsfs"):
        storage.exists("gs://bucket/docs.jsonl")
