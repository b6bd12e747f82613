"""The digest says "same thing" exactly when two artifacts are the same thing (a property test).

Over many pairs of randomly built artifacts, seeded: two that differ in type or in any field the digest
covers (a typed field, a file's content or name, scale, seed, the config's content, an input) never
share a digest, and two that differ only in what it leaves out (their folder, created_at, producer,
metrics, the config's locations and execution keys) always do. A failure names the seed that builds
the pair again: `pair(random.Random(seed), tmp_path)`.
"""

import copy
import random
from pathlib import Path

from nemotron.artifact import Artifact, ArtifactPath, ArtifactRef, Producer

PAIRS = 1000


class Alpha(Artifact):
    count: int
    ratio: float
    name: str
    flag: bool
    tags: list[str]
    table: dict[str, int]
    note: str | None = None
    data_path: Path  # a plain Path: a file field, as an ArtifactPath is
    extra_dir: ArtifactPath  # a folder
    shards: list[Path]


class Beta(Alpha):  # the same fields under another type
    pass


def draw(rng: random.Random) -> dict:
    """A random artifact, as a spec: its class, fields, files (relative name -> bytes), config, inputs."""
    word = lambda: rng.choice(["a", "b", "cat", "dog", "ünï", ""]) + str(rng.randrange(3))  # noqa: E731
    return {
        "cls": rng.choice([Alpha, Beta]),
        "count": rng.randrange(-5, 5), "ratio": rng.choice([0.0, 0.5, 1e-9, -2.25, 3.0]), "name": word(),
        "flag": rng.random() < 0.5, "tags": [word() for _ in range(rng.randrange(3))],
        "table": {word(): rng.randrange(4) for _ in range(rng.randrange(3))},
        "note": rng.choice([None, word()]),
        "scale": rng.choice(["tiny", "small"]), "seed": rng.randrange(3),
        "data": (rng.choice(["data.txt", "data.bin"]), rng.randbytes(rng.randrange(1, 6))),
        "extra": {f"f{i}": rng.randbytes(3) for i in range(rng.randrange(1, 3))},
        "shards": [(f"shard_{i}", rng.randbytes(2)) for i in range(rng.randrange(3))],
        "config": {"lr": rng.choice([0.1, 0.2]), "steps": rng.randrange(3), "output_dir": word(),
                   "num_threads": rng.randrange(1, 3)},
        "inputs": [("dataset", f"{rng.randrange(4):064x}") for _ in range(rng.randrange(3))],
        "metrics": {"wall_seconds": rng.random()},
    }


# What the digest covers: each mutation makes a different artifact.
def _changes(rng: random.Random, spec: dict) -> None:
    kind = rng.choice(["type", "count", "ratio", "name", "flag", "tags", "table", "note", "scale", "seed",
                       "data_bytes", "data_name", "extra", "shards", "config", "inputs"])
    if kind == "type":
        spec["cls"] = Beta if spec["cls"] is Alpha else Alpha
    elif kind in ("count", "seed"):
        spec[kind] += rng.randrange(1, 4)
    elif kind == "ratio":
        spec["ratio"] = spec["ratio"] + 0.125
    elif kind in ("name", "note"):
        spec[kind] = (spec[kind] or "") + "x"
    elif kind == "flag":
        spec["flag"] = not spec["flag"]
    elif kind == "tags":
        spec["tags"] = [*spec["tags"], "new"] if rng.random() < 0.5 else ["z", *spec["tags"]]
    elif kind == "table":
        spec["table"] = {**spec["table"], "k": 99}
    elif kind == "scale":
        spec["scale"] = "small" if spec["scale"] == "tiny" else "tiny"
    elif kind == "data_bytes":
        name, data = spec["data"]
        spec["data"] = (name, data + b"!")
    elif kind == "data_name":
        name, data = spec["data"]
        spec["data"] = ("renamed_" + name, data)  # same bytes, another file
    elif kind == "extra":
        spec["extra"] = {**spec["extra"], "f0": spec["extra"]["f0"] + b"?"}
    elif kind == "shards":
        spec["shards"] = [*spec["shards"], ("shard_new", b"")]
    elif kind == "config":
        spec["config"] = {**spec["config"], "lr": spec["config"]["lr"] * 3}
    else:
        spec["inputs"] = [*spec["inputs"], ("checkpoint", "f" * 64)]


# What the digest leaves out: each of these makes the same artifact (the folder always moves too).
def _keeps(rng: random.Random, spec: dict) -> None:
    kind = rng.choice(["nothing", "metrics", "output_dir", "num_threads"])
    if kind == "metrics":
        spec["metrics"] = {"wall_seconds": spec["metrics"]["wall_seconds"] + 1, "other": 1}
    elif kind == "output_dir":
        spec["config"] = {**spec["config"], "output_dir": "runs/moved"}
    elif kind == "num_threads":
        spec["config"] = {**spec["config"], "num_threads": spec["config"]["num_threads"] + 1}


def build(spec: dict, folder: Path, stamp: str) -> Artifact:
    folder.mkdir(parents=True)
    name, data = spec["data"]
    (folder / name).write_bytes(data)
    (folder / "extra").mkdir()
    for f, content in spec["extra"].items():
        (folder / "extra" / f).write_bytes(content)
    for f, content in spec["shards"]:
        (folder / f).write_bytes(content)
    return spec["cls"](
        path=folder, created_at=stamp, producer=Producer(step=stamp, command=stamp),
        count=spec["count"], ratio=spec["ratio"], name=spec["name"], flag=spec["flag"], tags=spec["tags"],
        table=spec["table"], note=spec["note"], scale=spec["scale"], seed=spec["seed"], data_path=folder / name,
        extra_dir=folder / "extra", shards=[folder / f for f, _ in spec["shards"]], config=spec["config"],
        inputs=[ArtifactRef(type=t, path=f"/elsewhere/{stamp}/{t}", digest=d) for t, d in spec["inputs"]],
        metrics=spec["metrics"],
    )


def pair(rng: random.Random, root: Path) -> tuple[Artifact, Artifact, bool]:
    """Two artifacts in two folders, and whether they should differ."""
    a = draw(rng)
    b = copy.deepcopy(a)
    differ = rng.random() < 0.7
    (_changes if differ else _keeps)(rng, b)
    return build(a, root / "a", "2026-01-01"), build(b, root / "elsewhere" / "b", "2027-02-02"), differ


def test_two_artifacts_share_a_digest_exactly_when_they_are_the_same_thing(tmp_path):
    differing = 0
    for seed in range(PAIRS):
        a, b, differ = pair(random.Random(seed), tmp_path / str(seed))
        same = a.compute_digest() == b.compute_digest()
        assert same != differ, (
            f"seed {seed}: artifacts that {'differ' if differ else 'are the same'} got "
            f"{'the same' if same else 'different'} digests: {a.identity()} vs {b.identity()}"
        )
        differing += differ
    assert differing > PAIRS // 2 and PAIRS - differing > PAIRS // 5  # both kinds of pair were drawn, often
