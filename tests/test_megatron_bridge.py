"""The Megatron-Bridge hand-off, checked against facts extracted from Megatron-Bridge's own source.

The facts (`src/nemotron/training/megatron_bridge/megatron_bridge_facts.json`, written by
`scripts/extract_megatron_bridge_facts.py` from the reference commit it names) say which fields each
ConfigContainer dataclass has, what the packed-Parquet reader requires and how its collate slices a row,
and what type GPTDatasetConfig's blend has. These tests read only that file, never the reference.
"""

import json
import math
import os
import sys
import typing
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pyarrow.parquet as pq
import pytest
import yaml

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation
from nemotron.data_prep.indexed import IndexedWriter
from nemotron.data_prep.packing import PackingConfig, pack_to_parquet
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError
from nemotron.training import megatron_bridge as mb
from nemotron.training.megatron_bridge.recipes import literal_values
from nemotron.training.optim import WarmupCosine, WarmupStableDecay

FACTS = json.loads(mb.FACTS_PATH.read_text())
CHATS = [
    ("What is two plus two?", "Four."),
    ("Name a color.", "Blue is a color."),
    ("Hello!", "Hi there, friend."),
    ("Who wrote Hamlet?", "Shakespeare wrote Hamlet."),
    ("Is the sea salty?", "Yes, the sea is salty."),
]
SCHEDULE = mb.Schedule(seq_length=256, train_iters=100, micro_batch_size=1, global_batch_size=64,
                       lr=3e-4, min_lr=3e-5, warmup_iters=10)
CLUSTER = mb.MegatronBridgeLaunch(data_root="s3://bucket/prefix", nodes=4, gpus_per_node=8)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """A real tokenizer, real bin/idx shards and real packed Parquet, laid out like our two datasets."""
    root = tmp_path_factory.mktemp("runs")
    texts = [f"{q} {a}" for q, a in CHATS] * 20
    pretrain_dir = root / "stage0_pretrain" / "data_curation"
    tokenizer_dir = train_tokenizer(texts, 350, pretrain_dir / "tokenizer", chat_template=NANO2_CHAT_TEMPLATE)
    tokenizer = load_tokenizer(tokenizer_dir)
    prefixes = {}
    for split in ("train", "valid", "test"):
        prefix = pretrain_dir / "shards" / split / "0123456789abcdef" / "shard_00000"
        prefix.parent.mkdir(parents=True)
        writer = IndexedWriter(prefix)
        for text in texts[:5]:
            writer.add_document(tokenizer.encode(text) + [2])
        writer.finalize()
        prefixes[split] = [prefix]
    pretrain = SimpleNamespace(path=pretrain_dir, tokenizer_dir=tokenizer_dir, vocab_size=len(tokenizer),
                               train_prefixes=prefixes["train"], valid_prefixes=prefixes["valid"],
                               test_prefixes=prefixes["test"])

    sft_dir = root / "stage1_sft" / "data_curation"
    conversations = [tokenize_conversation(tokenizer, [{"role": "user", "content": q},
                                                       {"role": "assistant", "content": a}]) for q, a in CHATS]
    config = PackingConfig(pack_size=128)
    pack_to_parquet(conversations[:3], sft_dir / "train_packed.parquet", config, show_progress=False)
    pack_to_parquet(conversations[3:], sft_dir / "valid_packed.parquet", config, show_progress=False)
    sft = SimpleNamespace(path=sft_dir, tokenizer_dir=tokenizer_dir, vocab_size=len(tokenizer), pack_size=128,
                          train_packed=sft_dir / "train_packed.parquet", valid_packed=sft_dir / "valid_packed.parquet")
    return SimpleNamespace(pretrain=pretrain, sft=sft, conversations=conversations, root=root)


def run_folders(artifacts, tmp_path, settings=CLUSTER, scale="tiny"):
    pretrain = mb.write_run_folder("pretrain", artifacts.pretrain, scale, SCHEDULE, settings, tmp_path / "pretrain")
    init = mb.checkpoint_location(settings, "stage0_pretrain", tmp_path / "pretrain")
    sft = mb.write_run_folder("sft", artifacts.sft, scale, SCHEDULE, settings, tmp_path / "sft", init_checkpoint=init)
    return pretrain, sft


# --- what the facts say, walked here independently of the module's own check ------------------------


def all_fields(key):
    entry = FACTS["classes"][key]
    fields = {}
    for base in entry["bases"]:
        fields = {**all_fields(base)[0], **fields}
    return {**fields, **entry["fields"]}, entry["complete"] and all(all_fields(b)[1] for b in entry["bases"])


def unknown_keys(values, key, where):
    fields, complete = all_fields(key)
    known = set(fields) if complete else set(fields) | set(FACTS["classes"][key].get("used_keys", []))
    problems = [f"{where}.{name}" for name in values if name not in known]
    init_false = FACTS["classes"][key].get("init_false", [])
    problems += [f"{where}.{name} (init=False)" for name in values if name in init_false]
    for name, value in values.items():
        if isinstance(value, dict) and name in fields:
            nested = [k for k in FACTS["classes"] if k.split(":")[1] in fields[name]]
            assert nested, f"{where}.{name} is a mapping but {fields[name]} names no dataclass in the facts"
            problems += unknown_keys(value, nested[0], f"{where}.{name}")
    return problems


@pytest.mark.parametrize("scale", ["tiny", "full"])
def test_every_override_key_exists_on_the_dataclass_it_targets(artifacts, tmp_path, scale):
    for plan in run_folders(artifacts, tmp_path, scale=scale):
        recipe = FACTS["recipes"][plan.recipe_function]
        assert recipe["module"] == plan.recipe_module and recipe["params"] == []
        overrides = yaml.safe_load((Path(plan.run_folder) / "overrides.yaml").read_text())
        assert set(overrides) <= set(FACTS["config_container"])
        for section, values in overrides.items():
            target = recipe["sections"].get(section) or FACTS["config_container"][section]["classes"][0]
            assert FACTS["classes"][target]["source"], f"{target} was not found in the reference"
            assert unknown_keys(values, target, section) == [], plan.recipe_function


def megatron_lr(overrides, iteration):
    """The rate Megatron-Core's OptimizerParamScheduler gives after warmup, read from the written
    overrides alone (its decay styles, as in megatron/core/optimizer_param_scheduler.py)."""
    scheduler, lr, min_lr = overrides["scheduler"], overrides["optimizer"]["lr"], overrides["optimizer"]["min_lr"]
    warmup, decay = scheduler["lr_warmup_iters"], scheduler["lr_decay_iters"]
    if scheduler["lr_decay_style"] == "cosine":
        coeff = 0.5 * (math.cos(math.pi * (iteration - warmup) / (decay - warmup)) + 1)
    else:
        assert scheduler["lr_decay_style"] == "WSD"
        anneal_start = decay - scheduler["lr_wsd_decay_iters"]
        ratio = max(0, iteration - anneal_start) / scheduler["lr_wsd_decay_iters"]
        coeff = {"linear": 1 - ratio, "cosine": 0.5 * (math.cos(math.pi * ratio) + 1),
                 "exponential": 2 * 0.5**ratio - 1, "minus_sqrt": 1 - math.sqrt(ratio)}[scheduler["lr_wsd_decay_style"]]
    return min_lr + coeff * (lr - min_lr)


@pytest.mark.parametrize("wsd_decay_iters", [None, 20])
def test_the_schedule_is_carried_over_as_the_same_curve(artifacts, tmp_path, wsd_decay_iters):
    schedule = replace(SCHEDULE, wsd_decay_iters=wsd_decay_iters)
    plan = mb.write_run_folder("pretrain", artifacts.pretrain, "tiny", schedule, CLUSTER, tmp_path)
    overrides = yaml.safe_load((Path(plan.run_folder) / "overrides.yaml").read_text())
    ratio = schedule.min_lr / schedule.lr
    if wsd_decay_iters is None:
        ours = WarmupCosine(schedule.warmup_iters, schedule.train_iters, ratio)
    else:
        decay_fraction = wsd_decay_iters / schedule.train_iters
        ours = WarmupStableDecay(schedule.warmup_iters, schedule.train_iters, ratio, decay_fraction)
    # After warmup, the rate Megatron computes from the overrides is the one our loop uses, step for step.
    for iteration in range(schedule.warmup_iters, schedule.train_iters + 1):
        assert schedule.lr * ours(iteration) == pytest.approx(megatron_lr(overrides, iteration), rel=1e-9)


def test_recipes_and_their_dataset_classes_are_the_reference_ones():
    assert len(FACTS["megatron_bridge_commit"]) == 40 and FACTS["megatron_core_version"] == "0.16.1"
    pretrain, sft = (FACTS["recipes"][mb.FAMILIES["nano2"].recipes[kind]] for kind in ("pretrain", "sft"))
    assert (pretrain["template"], sft["template"]) == ("_pretrain_common", "_sft_common")
    assert pretrain["sections"]["dataset"].endswith(":GPTDatasetConfig")
    assert sft["sections"]["dataset"].endswith(":GPTSFTDatasetConfig")
    assert pretrain["sections"]["model"].endswith(":HybridModelProvider")


def test_packed_parquet_has_the_columns_types_and_mask_shift_the_reader_expects(artifacts):
    facts = FACTS["packed_parquet"]
    path = artifacts.sft.train_packed
    assert any(path.name.endswith(suffix) for suffix in facts["accepted_suffixes"])
    schema = pq.read_schema(path)
    assert set(facts["required_columns"]) <= set(schema.names)
    for column, documented in facts["documented_types"].items():
        assert str(schema.field(column).type).replace("element: ", "") == documented
    assert str(schema.field("loss_mask").type) == f"list<element: {facts['writer_loss_mask_type']}>"

    # Slice every packed conversation exactly as the reference collate does and check that the weights
    # land on the labels that are assistant tokens (the unshifted mask of the conversation, one ahead).
    collate = facts["collate"]
    assert facts["seq_boundaries"] == "seq_start_id + [len(input_ids)]"
    originals = {tuple(ids): mask for ids, mask in artifacts.conversations}
    seen = 0
    for row in pq.read_table(path).to_pylist():
        bounds = row["seq_start_id"] + [len(row["input_ids"])]
        for start, end in zip(bounds[:-1], bounds[1:]):
            cut = {role: row[spec["column"]][start + spec["offsets"][0]: end + spec["offsets"][1]]
                   for role, spec in collate.items() if isinstance(spec, dict)}
            mask = originals[tuple(row["input_ids"][start:end])]
            assert cut["tokens"] == row["input_ids"][start:end - 1]
            assert len(cut["labels"]) == len(cut["tokens"]) == len(cut["loss_mask"])
            assert cut["loss_mask"] == mask[1:]  # weight k trains label k = token k + 1
            assert sum(cut["loss_mask"]) > 0
            seen += 1
    assert seen == 3


def conforms(value, annotation):
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        return any(conforms(value, arg) for arg in args)
    if annotation is type(None):
        return value is None
    if origin in (list, tuple):  # YAML has no tuples: a (prefixes, weights) pair arrives as a list
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple:
            return len(value) == len(args) and all(conforms(v, a) for v, a in zip(value, args))
        return all(conforms(v, args[0]) for v in value)
    return isinstance(value, annotation)


def test_bin_idx_blend_has_the_shape_gpt_dataset_config_takes(artifacts, tmp_path):
    plan, _ = run_folders(artifacts, tmp_path, settings=mb.MegatronBridgeLaunch("/lustre/nemotron", 1, 8))
    dataset = yaml.safe_load((Path(plan.run_folder) / "overrides.yaml").read_text())["dataset"]
    namespace = {name: getattr(typing, name) for name in ("Optional", "Tuple", "List")}
    blend_facts = FACTS["gpt_dataset_blend"]
    assert conforms(dataset["blend_per_split"], eval(blend_facts["blend_per_split"]["type"], namespace))
    assert dataset["blend"] is None and dataset["split"] is None  # "not to be used with blend_per_split"
    assert len(dataset["blend_per_split"]) == 3  # train, valid, test
    uploaded = {remote for _, remote in plan.upload}
    for prefixes, _weights in dataset["blend_per_split"]:
        for prefix in prefixes:
            assert prefix.startswith("/lustre/nemotron/stage0_pretrain/data_curation/shards/")
            assert {prefix + ".bin", prefix + ".idx"} <= uploaded
    locals_ = {Path(local) for local, _ in plan.upload}
    assert all(path.is_file() for path in locals_)


def test_missing_required_flags_are_one_clear_line(artifacts, tmp_path):
    with pytest.raises(NemotronError) as error:
        mb.write_run_folder("pretrain", artifacts.pretrain, "full", SCHEDULE, mb.MegatronBridgeLaunch(), tmp_path)
    message = str(error.value)
    assert "\n" not in message and all(flag in message for flag in ("--data-root", "--nodes", "--gpus-per-node"))
    with pytest.raises(NemotronError, match="--gpus-per-node") as error:
        mb.check_settings(mb.MegatronBridgeLaunch(data_root="/data", nodes=2))
    assert "--nodes," not in str(error.value)
    for root in ("gs://bucket/x", "relative/path"):
        with pytest.raises(NemotronError, match="--data-root"):
            mb.check_settings(mb.MegatronBridgeLaunch(data_root=root, nodes=1, gpus_per_node=8))
    with pytest.raises(NemotronError, match="not a multiple of micro batch"):
        mb.write_run_folder("pretrain", artifacts.pretrain, "tiny", SCHEDULE,
                            mb.MegatronBridgeLaunch("/data", nodes=3, gpus_per_node=8), tmp_path)
    assert not (tmp_path / "plan.json").exists()  # nothing written before the settings are known good


def test_dry_run_prints_a_complete_plan_without_importing_megatron_bridge(artifacts, tmp_path, capsys):
    image = "nvcr.io/nvidia/nemo:25.11"
    settings = mb.MegatronBridgeLaunch(data_root="s3://bucket/prefix", nodes=4, gpus_per_node=8, container_image=image)
    for plan in run_folders(artifacts, tmp_path, settings=settings, scale="full"):
        mb.launch(plan, dry_run=True)
        out, err = capsys.readouterr()
        assert out == ""  # stdout carries artifact JSON only
        for expected in (plan.recipe_function, "train_iters: 100", "global_batch_size: 64", "s3://bucket/prefix/",
                         "sbatch sbatch.sh", "torchrun.sh", "tensor_model_parallel_size: 2"):
            assert expected in err, expected
        folder = Path(plan.run_folder)
        sbatch = (folder / "sbatch.sh").read_text()
        for expected in ("#SBATCH --nodes=4", "#SBATCH --gpus-per-node=8", f"--container-image={image}",
                         "--nnodes 4 --nproc-per-node 8", "stage-in .", "train ."):
            assert expected in sbatch, expected
        assert "--nproc-per-node 8" in (folder / "torchrun.sh").read_text()
        assert json.loads((folder / "plan.json").read_text())["recipe_function"] == plan.recipe_function
        # object store: files opened as plain files are staged into the run folder's cache
        assert all(cached.startswith("cache/") and remote.startswith("s3://") for remote, cached in plan.stage_in)
    assert not any(name == "megatron.bridge" or name.startswith("megatron.bridge.") for name in sys.modules)
    sft_overrides = yaml.safe_load((Path(plan.run_folder) / "overrides.yaml").read_text())
    assert sft_overrides["checkpoint"]["pretrained_checkpoint"] == f"{tmp_path / 'pretrain'}/checkpoints"
    assert sft_overrides["dataset"]["offline_packing_specs"]["packed_train_data_path"].startswith("cache/")


def test_without_megatron_bridge_the_launch_fails_in_one_line_before_any_work(artifacts, tmp_path):
    pytest.importorskip("torch")
    try:
        import megatron.bridge  # noqa: F401
        pytest.skip("Megatron-Bridge is installed here")
    except ImportError:
        pass
    with pytest.raises(NemotronError, match="Megatron-Bridge is not installed"):
        mb.preflight(CLUSTER, dry_run=False)
    mb.preflight(CLUSTER, dry_run=True)  # a dry run needs only the flags
    plan, _ = run_folders(artifacts, tmp_path)
    with pytest.raises(NemotronError, match=r"pip install 'nemotron\[megatron\]'") as error:
        mb.launch(plan, dry_run=False)
    assert "\n" not in str(error.value)
    assert not (Path(plan.run_folder) / "checkpoints").exists()
    with pytest.raises(NemotronError, match="Megatron-Bridge is not installed"):
        mb.export_hf_checkpoint(tmp_path / "ckpt", tmp_path / "hf", "tiny", 350, artifacts.pretrain.tokenizer_dir)


def test_run_folder_is_deterministic(artifacts, tmp_path):
    first = run_folders(artifacts, tmp_path)
    snapshot = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    second = run_folders(artifacts, tmp_path)
    assert first == second
    assert snapshot == {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}


def test_dpo_at_scale_names_its_engine():
    assert "NeMo-RL" in mb.DPO_AT_SCALE and "\n" not in mb.DPO_AT_SCALE


def test_a_key_missing_from_the_dataclass_is_refused():
    recipe = mb.FAMILIES["nano2"].recipes["sft"]
    with pytest.raises(NemotronError, match="dataset.offline_packing_specs.packed_train_path is not a field"):
        mb.check_overrides({"dataset": {"offline_packing_specs": {"packed_train_path": "x"}}}, recipe)
    target = FACTS["recipes"][recipe]["sections"]["train"]
    assert unknown_keys({"train_iterz": 1, "train_iters": 1}, target, "train") == ["train.train_iterz"]


def test_a_value_a_literal_field_does_not_allow_is_refused():
    recipe = mb.FAMILIES["nano2"].recipes["pretrain"]
    mb.check_overrides({"scheduler": {"lr_decay_style": "WSD", "lr_wsd_decay_style": "linear"}}, recipe)
    with pytest.raises(NemotronError, match=r"scheduler.lr_decay_style = 'wsd' is not one of \['constant', "):
        mb.check_overrides({"scheduler": {"lr_decay_style": "wsd"}}, recipe)
    with pytest.raises(NemotronError, match="scheduler.lr_wsd_decay_style = 'Linear' is not one of"):
        mb.check_overrides({"scheduler": {"lr_wsd_decay_style": "Linear"}}, recipe)


@pytest.mark.parametrize(("annotation", "values"), [
    ("Literal['constant', 'WSD']", ["constant", "WSD"]),
    ("Optional[Literal['e4m3', 'hybrid']]", [None, "e4m3", "hybrid"]),
    ("Literal['single', 'cyclic'] | None", ["single", "cyclic", None]),
    ("Literal[-1, 0, 1, 2]", [-1, 0, 1, 2]),
    ("Literal['auto'] | int", None),  # other values are allowed too: no check
    ("Optional[int]", None),
    ("str", None),
])
def test_literal_values_reads_the_annotations_of_the_facts(annotation, values):
    assert literal_values(annotation) == values


def test_upload_puts_every_file_where_the_overrides_point(artifacts, tmp_path):
    root = tmp_path / "shared"
    plan, sft = run_folders(artifacts, tmp_path / "runs", settings=mb.MegatronBridgeLaunch(str(root), 1, 8))
    for run in (plan, sft):
        mb.main(["upload", run.run_folder])
        for local, remote in run.upload:
            assert Path(remote).read_bytes() == Path(local).read_bytes()
    overrides = yaml.safe_load((Path(sft.run_folder) / "overrides.yaml").read_text())
    specs = overrides["dataset"]["offline_packing_specs"]
    assert pq.read_schema(specs["packed_train_data_path"]).names == pq.read_schema(artifacts.sft.train_packed).names
    assert (Path(overrides["tokenizer"]["tokenizer_model"]) / "tokenizer.json").is_file()
    with pytest.raises(NemotronError, match="plan.json not found"):
        mb.main(["show", str(tmp_path)])


def test_the_command_line_shows_a_run_folder_and_refuses_anything_else(artifacts, tmp_path):
    import subprocess

    plan, _ = run_folders(artifacts, tmp_path)
    command = [sys.executable, "-m", "nemotron.training.megatron_bridge"]
    shown = subprocess.run([*command, "show", plan.run_folder], capture_output=True, text=True)
    assert shown.returncode == 0 and shown.stdout == "", shown.stderr
    assert f"{plan.recipe_module}.{plan.recipe_function}()" in shown.stderr and "torchrun.sh" in shown.stderr
    missing = subprocess.run([*command, "train", str(tmp_path)], capture_output=True, text=True)
    assert (missing.returncode, missing.stderr) == (2, f"error: {tmp_path}/plan.json not found; pass a run folder "
                                                       "written by write_run_folder\n")
    unknown = subprocess.run([*command, "launch", plan.run_folder], capture_output=True, text=True)
    assert unknown.returncode == 2 and "invalid choice: 'launch'" in unknown.stderr
