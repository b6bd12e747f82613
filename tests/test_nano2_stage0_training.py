"""nano2 stage 0 training: exact resume after a real kill, a self-contained model folder, refusals, DDP.

Everything runs on a real PretrainDataset made once by the real stage-0 data curation over two plays
(a reduced blend, as in test_nano2_stage0_data), with short runs (`FEW`: 12 steps of 4 x 64 tokens).
The uninterrupted in-process run `trained` is the reference the other runs are compared with.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from builders import write_plays_blend  # tests/ is on sys.path under pytest
from nemotron.cli import run
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.indexed import IndexedReader
from nemotron.errors import NemotronError
from nemotron.models.device import device_name, pick_device
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint, PretrainDataset
from nemotron.recipes.nano2.stage0_pretrain import data_curation
from nemotron.recipes.nano2.stage0_pretrain.evaluation import heldout_loss_of_model_dir
from nemotron.recipes.nano2.stage0_pretrain.training import Config, main
from nemotron.training.metrics import read_metrics

STEP = "nemotron.recipes.nano2.stage0_pretrain.training"
PLAYS = {"hamlet", "macbeth"}
FEW = {"steps": 12, "seq_len": 64, "micro_batch_size": 4, "checkpoint_every": 3, "eval_every": 3, "eval_batches": 2}


@pytest.fixture(scope="module", autouse=True)
def restore_threads():
    """The step sets torch's thread count for the process (1 at tiny); give other modules theirs back."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> PretrainDataset:
    blend = write_plays_blend(tmp_path_factory.mktemp("blend"), PLAYS, [0.8, 0.2, 0])
    config = data_curation.Config(blend_path=blend, vocab_size=512, num_shards=2, workers=1,
                                  output_dir=tmp_path_factory.mktemp("data"))
    return data_curation.main(config)


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory) -> PretrainCheckpoint:
    """The reference: FEW steps, uninterrupted, in this process."""
    return main(Config(dataset_path=dataset.path, output_dir=tmp_path_factory.mktemp("trained"), **FEW))


def _command(out: Path, *flags: str, **changes) -> list[str]:
    settings = {**FEW, **changes}
    options = [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]
    return [sys.executable, "-m", STEP, "--output-dir", str(out), *options, *flags]


def _same_weights(a: Path, b: Path) -> bool:
    first, second = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


# ---------------------------------------------------------------------------------------------------
# Resume after a real kill, and determinism
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_after_sigkill_ends_with_the_weights_and_loss_of_an_uninterrupted_run(dataset, trained, tmp_path,
                                                                                     capsys):
    out = tmp_path / "killed"
    command = _command(out, "--dataset-path", str(dataset.path))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (out / "checkpoints" / "step_000003").is_dir():
        assert process.poll() is None and time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (out / "model").exists() and not (out / "metadata.json").exists()  # killed mid-run

    # The same command again. The kill was real; the re-run is the command's own entry point (`nemotron.cli.run`)
    # in this process, which spares a second interpreter's ~4 s of imports (a bad input would exit 2 here too).
    capsys.readouterr()
    run(main, command[3:])
    resumed = PretrainCheckpoint.model_validate(json.loads(capsys.readouterr().out)["pretraincheckpoint"])

    assert 3 <= resumed.metrics["resumed_from_step"] < FEW["steps"]  # it really continued mid-run
    assert _same_weights(resumed.model_dir, trained.model_dir)
    assert resumed.training_loss == trained.training_loss
    assert resumed.validation_loss == trained.validation_loss
    records = read_metrics(resumed.metrics_path)
    assert [r["step"] for r in records] == list(range(1, FEW["steps"] + 1))  # each step once
    assert records == read_metrics(trained.metrics_path)
    assert resumed.digest == trained.digest


def test_same_seed_gives_the_same_checkpoint_digest(dataset, trained, tmp_path):
    again = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "again", **FEW))
    assert again.digest == trained.digest == PretrainCheckpoint.from_path(trained.path).compute_digest()
    assert _same_weights(again.model_dir, trained.model_dir)
    # The digest covers the metrics log, so it must hold no wall-clock numbers.
    assert not any("second" in key or "tok" in key for r in read_metrics(again.metrics_path) for key in r)


# ---------------------------------------------------------------------------------------------------
# The model folder: plain transformers loads it and reproduces the step's validation loss
# ---------------------------------------------------------------------------------------------------


def test_model_folder_loads_alone_and_gives_the_steps_validation_loss(dataset, trained):
    model = AutoModelForCausalLM.from_pretrained(trained.model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(trained.model_dir)
    assert tokenizer.chat_template == NANO2_CHAT_TEMPLATE
    first_valid_file = sorted((dataset.path / "splits").glob("*/valid/*.jsonl"))[0]  # the first valid work item
    first_text = json.loads(first_valid_file.open().readline())["text"]
    first_doc = IndexedReader(dataset.valid_prefixes[0])[0]  # its tokens, then EOS
    assert tokenizer(first_text, add_special_tokens=False)["input_ids"] == first_doc[:-1].tolist()

    # Independently of our window code: the valid token stream, cut into windows of seq_len + 1 that
    # share one token; the step scores the first eval_batches global batches of them.
    seq_len = FEW["seq_len"]
    docs = [doc for prefix in dataset.valid_prefixes for doc in IndexedReader(prefix)]
    stream = np.concatenate([np.asarray(doc, dtype=np.int64) for doc in docs])
    count = FEW["eval_batches"] * FEW["micro_batch_size"]
    windows = torch.stack([torch.from_numpy(stream[i * seq_len : (i + 1) * seq_len + 1]) for i in range(count)])
    with torch.no_grad():
        logits = model(input_ids=windows[:, :-1]).logits
    expected = F.cross_entropy(logits.flatten(0, 1).double(), windows[:, 1:].flatten()).item()

    assert trained.validation_loss == pytest.approx(expected, abs=1e-5)
    assert read_metrics(trained.metrics_path)[-1]["val_loss"] == trained.validation_loss
    # The stage-0 evaluation step scores the same windows the same way.
    loss, tokens = heldout_loss_of_model_dir(trained.model_dir, dataset.valid_prefixes, seq_len, count * seq_len)
    assert (loss, tokens) == (pytest.approx(expected, abs=1e-5), count * seq_len)
    first_val = next(r["val_loss"] for r in read_metrics(trained.metrics_path) if "val_loss" in r)
    assert trained.validation_loss < first_val  # and training did lower it


# ---------------------------------------------------------------------------------------------------
# Bad input: one line, exit 2, before any training step
# ---------------------------------------------------------------------------------------------------


def _copy_dataset(dataset: PretrainDataset, folder: Path) -> PretrainDataset:
    """The dataset folder moved elsewhere (its metadata rewritten to the new place), to damage freely."""
    shutil.copytree(dataset.path, folder)
    metadata = folder / "metadata.json"
    metadata.write_text(metadata.read_text().replace(str(dataset.path), str(folder)))
    return PretrainDataset.from_path(folder)


@pytest.mark.slow
def test_bad_input_is_one_error_line_and_exit_2_before_any_step(dataset, tmp_path, capfd):
    missing = _copy_dataset(dataset, tmp_path / "missing")
    Path(f"{missing.train_prefixes[1]}.bin").unlink()
    truncated = _copy_dataset(dataset, tmp_path / "truncated")
    shard = Path(f"{truncated.train_prefixes[1]}.bin")
    shard.write_bytes(shard.read_bytes()[:-10])
    other_shape = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "other_shape",
                              model_overrides=("hidden_size=64",), **{**FEW, "steps": 3}))
    capfd.readouterr()  # that run's progress lines

    cases = {  # name: (dataset, settings changed from FEW, expected error)
        "missing": (missing.path, {}, re.escape(f"references {missing.train_prefixes[1]}.bin, which does not exist")),
        "truncated": (truncated.path, {}, re.escape(str(shard)) + r" has \d+ bytes but .* the shard is truncated"),
        "other_shape": (dataset.path, {}, r"a different architecture \(hidden_size: checkpoint 64 vs model 128\)"),
        "seq_len": (dataset.path, {"seq_len": 1025},
                    r"sequences of 1025 tokens exceed the model.s max_position_embeddings=1024; lower --seq-len"),
    }
    # The command line, in two processes at once (each spends most of its time importing torch and
    # transformers): a refusal while loading the input, and one after the model is built, when resuming.
    running = {
        name: subprocess.Popen(_command(tmp_path / name, "--dataset-path", str(cases[name][0]), **cases[name][1]),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("missing", "other_shape")
    }
    # The other two in this process: the same NemotronError, which `nemotron.cli.run` prints as its one line.
    for name in ("truncated", "seq_len"):
        path, changes, expected = cases[name]
        with pytest.raises(NemotronError, match=expected) as error:
            main(Config(dataset_path=path, output_dir=tmp_path / name, **{**FEW, **changes}))
        assert "\n" not in str(error.value)
    assert "pretrain:" not in capfd.readouterr().err  # the training loop never started
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=300)
        assert process.returncode == 2, (name, stderr[-2000:])
        errors = [line for line in stderr.splitlines() if line.startswith("error")]
        assert len(errors) == 1 and stderr.rstrip().endswith(errors[0]), (name, stderr)
        assert re.search(cases[name][2], errors[0]), (name, errors[0])
        assert stdout == "" and "pretrain:" not in stderr  # no artifact, and the training loop never started
    for name in ("missing", "truncated", "seq_len"):
        assert not (tmp_path / name / "checkpoints").exists()
    # The folder of the other run is left as it was: its artifact, its checkpoints, its log.
    assert PretrainCheckpoint.from_path(other_shape.path).digest == other_shape.digest == other_shape.compute_digest()
    assert [p.name for p in (other_shape.path / "checkpoints").iterdir()] == ["step_000003"]


# ---------------------------------------------------------------------------------------------------
# DDP: two processes under torchrun train like one with the same global batch
# ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_under_torchrun_train_like_one_with_the_same_global_batch(dataset, tmp_path):
    few = {**FEW, "steps": 4, "checkpoint_every": 2, "eval_every": 2}
    one = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "one", **few))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               *_command(tmp_path / "two", "--dataset-path", str(dataset.path), **{**few, "micro_batch_size": 2})[1:]]
    ledger = tmp_path / "ledger.jsonl"  # the file tracker (tests/test_trackers.py tests it in one process)
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "NEMOTRON_TRACKER": f"file:{ledger}"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.strip().splitlines()) == 1  # one artifact JSON for the whole job, from rank 0
    two = PretrainCheckpoint.model_validate(json.loads(result.stdout)["pretraincheckpoint"])
    assert two.metrics["world_size"] == 2 and two.metrics["train_tokens"] == one.metrics["train_tokens"]
    assert PretrainCheckpoint.from_path(tmp_path / "two").digest == two.digest
    # Every rank loaded the dataset; only rank 0 told the tracker: one ledger line per artifact event.
    events = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["event"], e["type"]) for e in events] == [("use", "pretraindataset"), ("save", "pretraincheckpoint")]

    # Same windows, same math, different float summation order (each rank's loss over half the batch,
    # then Gloo's all-reduce of gradients and losses): the numbers agree to a few float32 ulps (measured
    # ~1e-7 relative after 4 steps). 1e-5 leaves headroom for that and still catches any wrong slice
    # or missing gradient average, which moves the loss by 1e-3 or more.
    for a, b in zip(read_metrics(one.metrics_path), read_metrics(two.metrics_path), strict=True):
        assert b["step"] == a["step"] and b["lr"] == a["lr"]
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
        assert ("val_loss" in b) == ("val_loss" in a)
        assert b.get("val_loss", 0.0) == pytest.approx(a.get("val_loss", 0.0), rel=1e-5)
    # Weights: AdamW divides each gradient by its own running magnitude, so where a gradient is nearly
    # zero (an embedding row of a token seen once) the float noise is amplified up to ~lr per step
    # (measured: 4e-5 on one embedding entry, < 1e-6 elsewhere). A wrong step moves weights by ~lr=3e-3.
    first, second = load_file(one.model_dir / "model.safetensors"), load_file(two.model_dir / "model.safetensors")
    assert max((first[name] - second[name]).abs().max().item() for name in first) < 3e-4


def test_full_scale_and_models_too_large_for_this_machine_are_refused_before_any_work(dataset, tmp_path):
    # The published 8.89B shape is Megatron-Bridge's job on a GPU cluster, never this loop's: at full
    # scale the step hands off, and without the cluster flags it says which ones it needs.
    full = _copy_dataset(dataset, tmp_path / "full")
    metadata = full.path / "metadata.json"
    metadata.write_text(metadata.read_text().replace('"scale": "tiny"', '"scale": "full"'))
    with pytest.raises(NemotronError, match=r"Megatron-Bridge hand-off needs --data-root, --nodes, --gpus-per-node"):
        main(Config(dataset_path=full.path, output_dir=tmp_path / "out_full", scale="full"))
    # ...and the plain loop itself refuses the full shape if asked to run it.
    with pytest.raises(NemotronError,
                       match=r"--scale full is the published \d+\.\d\dB-parameter model .* Megatron-Bridge"):
        main(Config(dataset_path=full.path, output_dir=tmp_path / "out_full", scale="full", engine="plain"))
    # Any other model whose weights, gradients and AdamW state exceed this machine's memory, likewise.
    huge = ("hidden_size=16384", "intermediate_size=65536", "hybrid_override_pattern=" + "-" * 40)
    with pytest.raises(NemotronError, match=r"GiB but this process may use .* Megatron-Bridge"):
        main(Config(dataset_path=dataset.path, output_dir=tmp_path / "out_huge", model_overrides=huge, **FEW))
    assert not (tmp_path / "out_full").exists() and not (tmp_path / "out_huge").exists()


# ---------------------------------------------------------------------------------------------------
# Resume on another machine: other thread counts, other precision (a GPU run continued on a CPU)
# ---------------------------------------------------------------------------------------------------


def _cut_back_to_step_9(run: Path, into: Path) -> Path:
    """A copy of a finished FEW run as if it had been stopped after its step-9 checkpoint."""
    shutil.copytree(run, into)
    shutil.rmtree(into / "checkpoints" / "step_000012")
    shutil.rmtree(into / "model")
    (into / "metadata.json").unlink()
    return into


def test_a_run_resumes_with_another_thread_count(dataset, trained, tmp_path):
    threads = torch.get_num_threads()
    resumed = main(Config(dataset_path=dataset.path, output_dir=_cut_back_to_step_9(trained.path, tmp_path / "r"),
                          num_threads=1 if threads > 1 else 2, **FEW))
    assert resumed.metrics["resumed_from_step"] == 9 and resumed.metrics["num_threads"] != threads
    assert resumed.metrics["device"] == device_name(pick_device("auto"))  # what its speed figures were measured on
    records, reference = read_metrics(resumed.metrics_path), read_metrics(trained.metrics_path)
    assert [r["step"] for r in records] == list(range(1, FEW["steps"] + 1))
    # Another thread count may split a reduction differently: the same numbers up to float rounding.
    for a, b in zip(reference, records, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-5) and b["lr"] == a["lr"]
    assert resumed.validation_loss == pytest.approx(trained.validation_loss, rel=1e-5)


def test_a_bf16_autocast_run_resumes_in_fp32_through_the_same_code_path(dataset, trained, tmp_path):
    # What a run saved on a GPU (auto precision: bf16 autocast) and continued on a CPU (fp32) does.
    bf16 = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "bf16", device="cpu", precision="bf16", **FEW))
    bf16_records = read_metrics(bf16.metrics_path)
    assert bf16_records[0]["loss"] != read_metrics(trained.metrics_path)[0]["loss"]  # autocast really ran
    resumed = main(Config(dataset_path=dataset.path, output_dir=_cut_back_to_step_9(bf16.path, tmp_path / "fp32"),
                          device="cpu", precision="fp32", **FEW))
    assert resumed.metrics["resumed_from_step"] == 9 and resumed.config["precision"] == "fp32"
    records = read_metrics(resumed.metrics_path)
    assert records[:9] == bf16_records[:9]  # the bf16 part of the log is kept as it was
    for a, b in zip(bf16_records[9:], records[9:], strict=True):  # steps 10-12: fp32 now, bf16-close
        assert b["step"] == a["step"] and b["loss"] == pytest.approx(a["loss"], rel=2e-2)
    assert resumed.validation_loss == pytest.approx(bf16.validation_loss, rel=2e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on a GPU machine; CI has none)")
def test_a_run_saved_on_a_gpu_resumes_on_the_cpu_and_the_reverse(dataset, trained, tmp_path):
    # The real cross-device resume: bf16 autocast on the GPU (auto precision), fp32 on the CPU.
    gpu = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "gpu", device="cuda", **FEW))
    assert gpu.metrics["device"].startswith("cuda")
    gpu_records = read_metrics(gpu.metrics_path)
    on_cpu = main(Config(dataset_path=dataset.path, output_dir=_cut_back_to_step_9(gpu.path, tmp_path / "on_cpu"),
                         device="cpu", **FEW))
    assert on_cpu.metrics["resumed_from_step"] == 9 and on_cpu.metrics["device"] == "cpu"
    for a, b in zip(gpu_records[9:], read_metrics(on_cpu.metrics_path)[9:], strict=True):
        assert b["step"] == a["step"] and b["loss"] == pytest.approx(a["loss"], rel=2e-2)
    # ...and a CPU run (fp32) continued on the GPU (bf16 autocast).
    on_gpu = main(Config(dataset_path=dataset.path, output_dir=_cut_back_to_step_9(trained.path, tmp_path / "on_gpu"),
                         device="cuda", **FEW))
    assert on_gpu.metrics["resumed_from_step"] == 9 and on_gpu.metrics["device"].startswith("cuda")
    for a, b in zip(read_metrics(trained.metrics_path)[9:], read_metrics(on_gpu.metrics_path)[9:], strict=True):
        assert b["step"] == a["step"] and b["loss"] == pytest.approx(a["loss"], rel=2e-2)
    assert on_gpu.validation_loss == pytest.approx(trained.validation_loss, rel=2e-2)
    # The saved model loads on the CPU in plain transformers, whatever device trained it.
    model = AutoModelForCausalLM.from_pretrained(on_gpu.path / "model")
    assert next(model.parameters()).device.type == "cpu"


def test_device_cuda_without_a_gpu_is_refused_before_any_work(dataset, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NemotronError, match="--device cuda"):
        main(Config(dataset_path=dataset.path, output_dir=tmp_path / "cuda", device="cuda", **FEW))
    assert not (tmp_path / "cuda").exists()


def test_compile_auto_at_tiny_trains_the_eager_run_bitwise(dataset, trained, tmp_path):
    """tiny must not get slower: its steps are within the measured break-even, so auto trains eagerly."""
    auto = main(Config(dataset_path=dataset.path, output_dir=tmp_path / "auto", compile="auto", **FEW))
    assert auto.metrics["compiled"] is False and trained.metrics["compiled"] is False
    assert _same_weights(auto.path / "model", trained.path / "model")


@pytest.mark.slow
def test_a_compiled_run_trains_the_eager_runs_losses_to_float_rounding(dataset, tmp_path):
    """--compile on: the model and its loss under torch.compile give the eager step's numbers (one MLP layer:
    compiling the Mamba-2 and attention layers on two cores takes minutes; tests/test_mamba2_fused.py
    compiles the scan). fp32 on any device, so that on a GPU it checks the CUDA-graph replay to fp32 rounding."""
    few = {**FEW, "steps": 3, "precision": "fp32", "model_overrides": ("hybrid_override_pattern=-",)}
    runs = {on: main(Config(dataset_path=dataset.path, output_dir=tmp_path / str(on), compile=on, **few))
            for on in (False, True)}
    assert runs[True].metrics["compiled"] is True and runs[False].metrics["compiled"] is False
    records = [read_metrics(runs[on].metrics_path) for on in (False, True)]
    for eager, compiled in zip(*records, strict=True):
        assert compiled["loss"] == pytest.approx(eager["loss"], rel=1e-5), compiled["step"]
        assert compiled["grad_norm"] == pytest.approx(eager["grad_norm"], rel=1e-4), compiled["step"]
    assert runs[True].validation_loss == pytest.approx(runs[False].validation_loss, rel=1e-5)


def test_each_validation_keeps_the_per_token_loss_of_the_first_held_out_windows(dataset, trained):
    """watch.jsonl, a hashed file of the artifact: at each validation the loss of every token of the first
    held-out windows (the same text each time), which falls as the model learns."""
    from nemotron.training.watch import HELDOUT_TEXTS

    kept = [json.loads(line) for line in trained.watch_path.read_text().splitlines()]
    validations = [r["step"] for r in read_metrics(trained.metrics_path) if "val_loss" in r]
    assert [r["step"] for r in kept] == validations and {r["kind"] for r in kept} == {"tokens"}
    assert "watch.jsonl" in trained.file_hashes
    first_doc = IndexedReader(dataset.valid_prefixes[0])[0]
    for record in kept:
        assert len(record["texts"]) == HELDOUT_TEXTS and all(len(t["loss"]) == FEW["seq_len"] for t in record["texts"])
        assert [t["tokens"] for t in record["texts"]] == [t["tokens"] for t in kept[0]["texts"]]  # a fixed text
    tokenizer = AutoTokenizer.from_pretrained(trained.model_dir)
    assert "".join(kept[0]["texts"][0]["tokens"]).startswith(tokenizer.decode(first_doc[:8]))
    mean = [sum(t["loss"]) / len(t["loss"]) for t in kept[-1]["texts"] + kept[0]["texts"]]
    assert sum(mean[:HELDOUT_TEXTS]) < sum(mean[HELDOUT_TEXTS:])
