"""Dedup as stages (data_prep/stages/dedup.py): the driver decides from per-document signatures alone,
and keeps, drops and draws exactly the documents the in-memory curation (cap_documents -> apply_filters ->
exact_dedup -> near_dedup -> DataBlend.draw) keeps, drops and draws."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from nemotron.data_prep import DataBlend
from nemotron.data_prep.blend import cap_documents
from nemotron.data_prep.dedup import exact_dedup, near_dedup
from nemotron.data_prep.quality import apply_filters, default_filters
from nemotron.data_prep.stages import ReadStage, TokenizeWriteStage, plan_stages, plan_work_items, run_stages
from nemotron.data_prep.stages.dedup import DecisionStage, SignatureStage, resolve_signatures

WORDS = ("the a of and to king queen crown sword river night day love war peace bread stone wind fire ship "
         "horse field castle tower letter ring gold silver winter summer").split()
LIMIT, SEED, THRESHOLD = 150, 3, 0.8


def _prose(rng: random.Random) -> str:
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 14))).capitalize() + "."
                 for _ in range(rng.randint(12, 20))]
    return "\n".join(" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3))


def _near_copy(text: str) -> str:
    words = text.split(" ")
    words[len(words) // 2] = "changed"
    return " ".join(words)


@pytest.fixture(scope="module")
def blend(tmp_path_factory) -> DataBlend:
    """Two sources (the second upweighted 2.5x: whole repeats plus a seeded sample), planted exact and
    near duplicates within and across sources and work items, junk, and more documents than LIMIT."""
    root, rng = tmp_path_factory.mktemp("dedup_stages"), random.Random(0)
    first = [{"id": f"a{n}", "text": _prose(rng)} for n in range(110)]
    second = [{"id": f"b{n}", "text": _prose(rng)} for n in range(70)]
    first += [{"id": "a-exact", "text": first[3]["text"].upper().replace(" ", "  ")},
              {"id": "a-near", "text": _near_copy(first[60]["text"])},
              {"id": "a-junk", "text": "BUY NOW click here"}]
    second += [{"id": "b-exact-of-a", "text": first[90]["text"]},
               {"id": "b-near-of-a", "text": _near_copy(first[5]["text"])},
               {"id": "b-near-of-b", "text": _near_copy(second[2]["text"])}]
    for name, records in (("first.jsonl", first), ("second.jsonl", second)):
        (root / name).write_text("".join(json.dumps(record) + "\n" for record in records))
    return DataBlend.from_dict({"sources": [{"path": "first.jsonl", "name": "first"},
                                            {"path": "second.jsonl", "name": "second", "weight": 2.5}],
                                "split": [0.7, 0.2, 0.1]}, base_dir=root)


def _in_memory(blend: DataBlend) -> tuple[dict, dict[str, Counter]]:
    docs, _ = blend.read()
    docs, capped = cap_documents(docs, LIMIT, SEED)
    docs, quality = apply_filters(docs, default_filters())
    docs, exact = exact_dedup(docs)
    docs, near = near_dedup(docs, threshold=THRESHOLD)
    drawn = {split: Counter(doc.id for doc in blend.draw(docs, split, seed=SEED)[0]) for split in blend.splits}
    removed = {"scale_cap": capped, "exact_duplicate": exact["exact_duplicates"],
               "near_duplicate": near["near_duplicates"]}
    return {"removed": removed, "quality": quality, "curated": len(docs)}, drawn


def _signatures(blend: DataBlend, folder: Path):
    items, inputs = plan_work_items(blend, work_item_bytes=40_000)  # several items per file
    run = plan_stages(items, inputs, [ReadStage(), SignatureStage(blend.split, seed=SEED)], folder / "signatures")
    run_stages(run, progress=False)
    return items, inputs, run


def test_the_stages_keep_drop_and_draw_what_the_in_memory_curation_does(blend, tmp_path):
    expected, expected_drawn = _in_memory(blend)
    assert all(expected["removed"].values()) and sum(expected["quality"].values())  # every rule has work to do
    items, inputs, signatures = _signatures(blend, tmp_path)
    assert len({item.source for item in items}) == 2 and len(items) > 2
    resolution = resolve_signatures(signatures, blend, tmp_path / "decisions", limit=LIMIT, seed=SEED,
                                    threshold=THRESHOLD)
    assert resolution.removed == expected["removed"]
    assert resolution.removed_by_quality == expected["quality"]
    assert resolution.curated == expected["curated"]

    written = plan_stages(items, inputs, [ReadStage(), DecisionStage(resolution),
                                          TokenizeWriteStage("jsonl", None, record="document")], tmp_path / "splits")
    run_stages(written, progress=False)
    files = {split: sorted((Path(written.output_dir) / split).glob("*.jsonl")) for split in blend.splits}
    drawn = {split: Counter(json.loads(line)["id"] for path in paths for line in path.open())
             for split, paths in files.items()}
    assert drawn == expected_drawn
    # the upweighted source: one whole pass plus a seeded sample drawn twice
    assert {count for doc_id, count in drawn["train"].items() if doc_id.startswith("b")} == {1, 2}


def test_the_driver_decides_from_signatures_alone(blend, tmp_path):
    """With the raw sources gone, the driver still decides: it never reads a document's text; a signature
    is a fixed-size row whatever the document's length."""
    copy = tmp_path / "blend"
    shutil.copytree(Path(blend.source_locations()["first.jsonl"]).parent, copy)
    moved = DataBlend.from_dict(blend.model_dump(mode="json", exclude_none=True), base_dir=copy)
    _, _, signatures = _signatures(moved, tmp_path)
    for name in ("first.jsonl", "second.jsonl"):
        (copy / name).unlink()
    resolution = resolve_signatures(signatures, moved, tmp_path / "decisions", limit=LIMIT, seed=SEED,
                                    threshold=THRESHOLD)
    assert resolution.curated > 0
    table = np.load(Path(signatures.output_dir) / "signatures" / f"{signatures.items[0].name}.npy")
    assert table.dtype.itemsize == 32 + 32 + 128 * 8 + 2 + 1 and not table.dtype.hasobject
