"""nano2 stage-1 data curation as stage lists: the same bytes for any worker count, a SIGKILLed run
resumes from its receipts to the same bytes, and the driver's decisions from signatures alone keep
held-out questions out of train and count what dedup and validation removed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nemotron.data_prep.conversations import question_key, read_conversations
from nemotron.errors import NemotronError
from nemotron.recipes.nano2.stage1_sft.data_curation import Config, main

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = ("train_packed.parquet", "valid_packed.parquet", "train_conversations.jsonl", "valid_conversations.jsonl",
           "test_conversations.jsonl")
WORDS = "red blue green river stone bread lamp cloud music garden winter paper horse candle".split()


def _chat(rng: random.Random, question: str | None = None, **fields) -> dict:
    question = question or " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + "?"
    answer = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))) + "."
    return {**fields, "messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}


def _pools(folder: Path, count: int, chats: int) -> tuple[Path, ...]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        rng = random.Random(k)
        path = folder / f"pool{k:02d}.jsonl"
        path.write_text("".join(json.dumps(_chat(rng, id=f"pool{k}/{n}")) + "\n" for n in range(chats)))
        paths.append(path)
    return tuple(paths)


def _outputs(folder: Path) -> dict[str, bytes]:
    return {name: (folder / name).read_bytes() for name in OUTPUTS}


def test_one_worker_and_two_write_the_same_bytes(tiny_base_checkpoint, tmp_path):
    pools = _pools(tmp_path / "pools", 3, 150)  # with chatterbot and the skill's chats: five work items
    one = main(Config(checkpoint_path=tiny_base_checkpoint.path, extra_pool_path=pools, output_dir=tmp_path / "one",
                      workers=1))
    two = main(Config(checkpoint_path=tiny_base_checkpoint.path, extra_pool_path=pools, output_dir=tmp_path / "two",
                      workers=2))
    assert one.digest == two.digest
    assert _outputs(one.path) == _outputs(two.path)
    assert one.metrics["conversations_read"] == {"chatterbot": one.metrics["conversations_read"]["chatterbot"],
                                                 "largest": 2000, **{path.name: 150 for path in pools}}


KILLED_RUN = """
import sys
from pathlib import Path
from nemotron.recipes.nano2.stage1_sft.data_curation import Config, main
main(Config(checkpoint_path=Path(sys.argv[1]), use_chatterbot=False, skill_problems=0, output_dir=Path(sys.argv[2]),
            extra_pool_path=tuple(Path(p) for p in sys.argv[3:]), workers=1))
"""


def test_a_run_killed_with_sigkill_resumes_from_its_receipts_to_the_same_bytes(tiny_base_checkpoint, tmp_path):
    pools = _pools(tmp_path / "pools", 10, 400)
    config = {"checkpoint_path": tiny_base_checkpoint.path, "use_chatterbot": False, "skill_problems": 0,
              "extra_pool_path": pools}
    reference = main(Config(**config, output_dir=tmp_path / "reference"))
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    arguments = [str(tiny_base_checkpoint.path), str(tmp_path / "killed"), *map(str, pools)]
    killed = subprocess.Popen([sys.executable, "-c", KILLED_RUN, *arguments], env=env, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    receipts = tmp_path / "killed" / "splits"  # the writing pass: <run>/receipts/shard_NNNNN.json
    deadline = time.monotonic() + 300
    while killed.poll() is None and len(list(receipts.glob("*/receipts/*.json"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(killed.pid, signal.SIGKILL)  # mid-way through the writing pass
    killed.wait()
    done = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in receipts.glob("*/receipts/*.json")}
    assert 0 < len(done) < len(pools), "the kill must land mid-run"
    assert not (tmp_path / "killed" / "metadata.json").exists()  # no artifact vouches for a killed run
    resumed = main(Config(**config, output_dir=tmp_path / "killed"))
    assert resumed.digest == reference.digest
    assert _outputs(resumed.path) == _outputs(reference.path)
    # the items finished before the kill were re-used from their receipts, not made again
    assert all((path.stat().st_mtime_ns, path.read_bytes()) == before for path, before in done.items())


def test_held_out_questions_stay_out_of_train_and_removals_are_counted(tiny_base_checkpoint, tmp_path):
    rng = random.Random(7)
    chats = [_chat(rng, id=f"c{n}") for n in range(300)]
    # one question asked 40 times with different answers: the hash split scatters it, the repair must not
    chats += [_chat(rng, "What is the secret of the garden?", id=f"secret{n}") for n in range(40)]
    chats += [{**chats[n], "id": f"copy{n}"} for n in range(25)]  # exact duplicates under other ids
    chats += [{"id": f"bad{n}", "messages": [{"role": "user", "content": "Hello?"}]} for n in range(3)]
    chats += [{"id": "late", "messages": [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "Why?"},
                                          {"role": "assistant", "content": "Because."}]}]
    half = len(chats) // 2  # two pools: the duplicates and the repair cross work items
    pools = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    for path, part in zip(pools, (chats[:half], chats[half:]), strict=True):
        path.write_text("".join(json.dumps(chat) + "\n" for chat in part))
    art = main(Config(checkpoint_path=tiny_base_checkpoint.path, use_chatterbot=False, skill_problems=0,
                      extra_pool_path=tuple(pools), output_dir=tmp_path / "out", split_ratios=(0.6, 0.2, 0.2)))
    questions = {split: {question_key(c) for c in read_conversations(getattr(art, f"{split}_conversations"))}
                 for split in ("train", "valid", "test")}
    assert not questions["train"] & (questions["valid"] | questions["test"])
    assert not questions["valid"] & questions["test"]
    m = art.metrics
    assert m["exact_duplicates"] == 25
    assert m["rejected_by_reason"] == {"does not end with an assistant turn": 3,
                                       "does not start with a user turn": 1}
    assert m["split_groups_repaired"] >= 1 and m["split_moved_total"] > 0
    assert sum(m["split_final"].values()) == 340 == (art.num_train_conversations + art.num_valid_conversations
                                                     + art.num_test_conversations)
    # the driver's curation files hold hashes and decisions, never a conversation's text
    curation = [path.read_bytes() for path in (tmp_path / "out" / "curation").rglob("*.npy")]
    assert curation and not any(b"secret of the garden" in data for data in curation)


def test_a_missing_pool_is_one_clear_error(tiny_base_checkpoint, tmp_path):
    with pytest.raises(NemotronError, match=r"JSONL file not found: .*missing.jsonl; check the path") as error:
        main(Config(checkpoint_path=tiny_base_checkpoint.path, extra_pool_path=(tmp_path / "missing.jsonl",),
                    output_dir=tmp_path / "out"))
    assert "\n" not in str(error.value) and not (tmp_path / "out").exists()
