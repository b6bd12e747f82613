"""The shared training library: optimizer groups and schedule, checkpoints and exact resume,
token windows and the metrics log (the distributed setup: tests/test_distributed.py)."""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from nemotron.data_prep.indexed import IndexedWriter
from nemotron.errors import NemotronError
from nemotron.models.nano2 import build_config, build_model
from nemotron.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from nemotron.training.metrics import MetricsLog, read_metrics
from nemotron.training.optim import WarmupStableDecay, build_optimizer, lr_schedule, wsd_decay_steps
from nemotron.training.run import seed_everything
from nemotron.training.samplers import EpochSampler
from nemotron.training.windows import TokenWindows

VOCAB = 300
SEQ_LEN = 32


def small_model(seed=0, **overrides):
    settings = {"hidden_size": 64, "intermediate_size": 128, "mamba_head_dim": 32, **overrides}
    return build_model(build_config("tiny", VOCAB, **settings), seed=seed)


def write_shards(folder, documents_per_shard=(40, 25), seed=0):
    """Real bin/idx shards of random documents ending with EOS (id 2), lengths 5..60 tokens."""
    rng = np.random.default_rng(seed)
    prefixes, streams = [], []
    for shard, count in enumerate(documents_per_shard):
        prefix = folder / f"shard_{shard:02d}"
        with IndexedWriter(prefix, np.uint16) as writer:
            for _ in range(count):
                document = np.append(rng.integers(5, VOCAB, rng.integers(5, 60)), 2)
                writer.add_document(document)
                streams.append(document)
        prefixes.append(prefix)
    return prefixes, np.concatenate(streams)


# ---- optimizer and schedule ------------------------------------------------------------------------


def test_weight_decay_skips_norms_biases_mamba_dynamics_and_embeddings():
    model = small_model()
    decayed, not_decayed = build_optimizer(model, lr=1e-3, weight_decay=0.1).param_groups
    assert decayed["weight_decay"] == 0.1 and not_decayed["weight_decay"] == 0.0
    no_decay = set(not_decayed["names"])
    assert "model.embeddings.weight" in no_decay
    assert {"model.layers.0.mixer.A_log", "model.layers.0.mixer.D", "model.layers.0.mixer.dt_bias"} <= no_decay
    assert {"model.layers.0.norm.weight", "model.norm_f.weight", "model.layers.0.mixer.conv1d.bias"} <= no_decay
    assert {"lm_head.weight", "model.layers.0.mixer.in_proj.weight", "model.layers.1.mixer.up_proj.weight"} <= set(
        decayed["names"]
    )
    assert len(decayed["params"]) + len(not_decayed["params"]) == len(list(model.parameters()))


def test_the_cosine_schedule_rises_linearly_then_decays_to_the_floor():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    scheduler = lr_schedule(optimizer, warmup_steps=4, total_steps=14, min_lr_ratio=0.1)
    lrs = []
    for _ in range(16):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:5] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert lrs[9] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the cosine
    assert all(a > b for a, b in zip(lrs[4:14], lrs[5:14]))
    assert lrs[14] == lrs[15] == pytest.approx(0.1)


@pytest.mark.parametrize("decay_fraction", [None, 0.2])
def test_an_annealed_schedule_decays_linearly_from_where_it_was_to_the_floor_and_resumes_so(decay_fraction):
    """What --patience does: from the step after `start` the rate falls linearly to the floor at `end`, from
    the planned rate at `start` (no jump), whatever the schedule; a checkpoint's scheduler state keeps it."""
    def scheduler_of(parameter):
        optimizer = torch.optim.AdamW([parameter], lr=1.0)
        return optimizer, lr_schedule(optimizer, warmup_steps=4, total_steps=40, min_lr_ratio=0.1,
                                      decay_fraction=decay_fraction)

    def rates(optimizer, scheduler, steps):
        lrs = []
        for _ in range(steps):
            lrs.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        return lrs

    optimizer, scheduler = scheduler_of(torch.nn.Parameter(torch.zeros(2)))
    planned = rates(*scheduler_of(torch.nn.Parameter(torch.zeros(2))), 40)
    lrs = rates(optimizer, scheduler, 12)  # steps 1..12 (lrs[i] is step i + 1's rate)
    scheduler.lr_lambdas[0].anneal(12, 17)  # patience fired after step 12: the run ends at step 17
    saved = scheduler.state_dict()
    lrs += rates(optimizer, scheduler, 5)  # steps 13..17
    assert lrs[:13] == pytest.approx(planned[:13])  # step 13 keeps the rate computed after step 12
    start = planned[12]
    assert lrs[12:] == pytest.approx([start + (0.1 - start) * k / 4 for k in range(5)])
    assert lrs[-1] == pytest.approx(0.1) and start > 0.5  # the floor at the last step, from a high rate

    # Resumed from the checkpoint taken after step 12: the same rates.
    optimizer, scheduler = scheduler_of(torch.nn.Parameter(torch.zeros(2)))
    scheduler.load_state_dict(saved)
    optimizer.param_groups[0]["lr"] = scheduler.get_last_lr()[0]
    assert rates(optimizer, scheduler, 5) == pytest.approx(lrs[12:])


def test_schedule_rejects_warmup_longer_than_training():
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1.0)
    with pytest.raises(NemotronError, match="warmup_steps=20"):
        lr_schedule(optimizer, warmup_steps=20, total_steps=10)


def test_wsd_anneals_over_its_fraction_of_the_steps_and_refuses_a_fraction_outside_0_to_1():
    # The one rule for both our loop (WarmupStableDecay) and Megatron's lr_wsd_decay_iters at scale.
    assert [wsd_decay_steps(fraction, 300) for fraction in (0.2, 1.0, 0.001)] == [60, 300, 1]
    assert WarmupStableDecay(10, 300, 0.1, 0.2).decay_steps == 60
    for fraction in (0.0, 1.5):
        with pytest.raises(NemotronError, match=rf"--decay-fraction {fraction} must be in \(0, 1\]"):
            wsd_decay_steps(fraction, 300)


# ---- token windows -------------------------------------------------------------------------------


def test_windows_cut_the_document_stream_and_overlap_by_one_token(tmp_path):
    prefixes, stream = write_shards(tmp_path)
    windows = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=4, seed=0)
    assert windows.num_tokens == len(stream)
    assert windows.num_windows == (len(stream) - 1) // SEQ_LEN
    for i in (0, 1, windows.num_windows - 1):
        np.testing.assert_array_equal(windows.window(i), stream[i * SEQ_LEN : (i + 1) * SEQ_LEN + 1])


def test_an_epoch_visits_every_window_once_in_a_seeded_order(tmp_path):
    prefixes, _ = write_shards(tmp_path)
    windows = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=1, seed=5)
    first_tokens = {tuple(windows.window(i)[:8]) for i in range(windows.num_windows)}
    epoch = [tuple(windows.next_batch()[0, :8].tolist()) for _ in range(windows.num_windows)]
    assert set(epoch) == first_tokens and len(epoch) == windows.num_windows
    assert windows.state_dict()["epoch"] == 1 and windows.state_dict()["index"] == 0
    other_seed = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=1, seed=6)
    assert [tuple(other_seed.next_batch()[0, :8].tolist()) for _ in range(5)] != epoch[:5]


@pytest.mark.parametrize("steps", [1, 4, 30])
def test_items_of_first_steps_are_exactly_what_every_rank_trains_on(steps):
    # What DPO's one-time reference pass scores: nothing a step hands out may be missing from it.
    items = [f"pair-{i}" for i in range(50)]
    ranks = [EpochSampler(items, micro_batch_size=2, accumulation=2, seed=3, rank=r, world_size=2) for r in (0, 1)]
    handed_out = {item for sampler in ranks for _ in range(steps) for micro in sampler.next_step() for item in micro}
    expected = EpochSampler(items, 2, 2, seed=3, rank=0, world_size=2).items_of_first_steps(steps)
    assert set(expected) == handed_out and len(expected) == len(handed_out) == min(steps * 8, 50)
    assert expected == sorted(expected, key=items.index)  # in item order


def test_windows_are_deterministic_and_resume_from_their_state(tmp_path):
    prefixes, _ = write_shards(tmp_path)

    def make():
        return TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=3, seed=1)

    uninterrupted = make()
    expected = [uninterrupted.next_batch() for _ in range(20)]  # crosses several epoch boundaries
    first = make()
    seen = [first.next_batch() for _ in range(7)]
    resumed = make()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))  # survives a JSON round trip
    seen += [resumed.next_batch() for _ in range(13)]
    assert all(torch.equal(a, b) for a, b in zip(expected, seen))
    assert expected[0].shape == (3, SEQ_LEN + 1) and expected[0].dtype == torch.int64


def test_resuming_windows_with_other_settings_is_refused(tmp_path):
    prefixes, _ = write_shards(tmp_path)
    state = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=3, seed=1).state_dict()
    with pytest.raises(NemotronError, match="seq_len"):
        TokenWindows(prefixes, seq_len=16, batch_size=3, seed=1).load_state_dict(state)


def test_ranks_split_each_global_batch_without_overlap(tmp_path):
    prefixes, _ = write_shards(tmp_path)
    single = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=4, seed=2)
    ranks = [TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=2, seed=2, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(3):
        assert torch.equal(single.next_batch(), torch.cat([rank.next_batch() for rank in ranks]))


def test_too_little_data_for_one_batch_is_a_clear_error(tmp_path):
    prefixes, _ = write_shards(tmp_path, documents_per_shard=(2,))
    with pytest.raises(NemotronError, match="fewer than one global batch"):
        TokenWindows(prefixes, seq_len=512, batch_size=8, seed=0)


# ---- checkpoints -----------------------------------------------------------------------------------


def train_steps(model, optimizer, scheduler, windows, steps):
    for _ in range(steps):
        batch = windows.next_batch()
        logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        losses = torch.nn.functional.cross_entropy(
            logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1), reduction="none"
        )
        # Randomness the trainer draws itself (here: a random 80% of the positions count, like
        # dropout) must also continue exactly after a resume: the RNG states are in the checkpoint.
        keep = torch.rand(losses.shape) < 0.8
        loss = losses[keep].mean()
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()


def fresh_run(prefixes):
    seed_everything(0)
    model = small_model(seed=0)
    optimizer = build_optimizer(model, lr=3e-3)
    scheduler = lr_schedule(optimizer, warmup_steps=2, total_steps=6)
    windows = TokenWindows(prefixes, seq_len=SEQ_LEN, batch_size=2, seed=0)
    return model, optimizer, scheduler, windows


def test_train_3_save_reload_train_3_equals_train_6_exactly(tmp_path):
    prefixes, _ = write_shards(tmp_path)
    model, optimizer, scheduler, windows = fresh_run(prefixes)
    train_steps(model, optimizer, scheduler, windows, 6)

    run_dir = tmp_path / "run"
    first = fresh_run(prefixes)
    train_steps(*first, 3)
    save_checkpoint(run_dir, 3, first[0], first[1], first[2], data_state=first[3].state_dict(), extra={"loss": 1.5})
    torch.rand(5)  # the interrupted process goes on drawing random numbers; the resume must not care

    resumed_model, resumed_optimizer, resumed_scheduler, resumed_windows = fresh_run(prefixes)
    seed_everything(99)  # a different seed, to prove the saved RNG states are what counts
    state = load_checkpoint(latest_checkpoint(run_dir), resumed_model, resumed_optimizer, resumed_scheduler)
    resumed_windows.load_state_dict(state["data_state"])
    assert state["step"] == 3 and state["extra"] == {"loss": 1.5}
    train_steps(resumed_model, resumed_optimizer, resumed_scheduler, resumed_windows, 3)

    expected, actual = model.state_dict(), resumed_model.state_dict()
    assert all(torch.equal(expected[name], actual[name]) for name in expected)
    assert scheduler.get_last_lr() == resumed_scheduler.get_last_lr()


def test_checkpoint_folder_is_a_self_contained_hugging_face_model(tmp_path):
    from nemotron.data_prep.tokenizer import train_tokenizer

    tokenizer_dir = train_tokenizer(["to be or not to be, that is the question"] * 20, 300, tmp_path / "tok")
    model = small_model()
    optimizer = build_optimizer(model, lr=1e-3)
    folder = save_checkpoint(
        tmp_path / "run", 50, model, optimizer, None, data_state={},
        tokenizer=AutoTokenizer.from_pretrained(tokenizer_dir),
    )
    assert folder.name == "step_000050"
    assert AutoTokenizer.from_pretrained(folder).eos_token == "</s>"
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert all(torch.equal(model.state_dict()[k], v) for k, v in reloaded.state_dict().items())


def test_leftover_temp_folder_is_ignored_and_old_checkpoints_are_pruned(tmp_path):
    model = small_model()
    optimizer = build_optimizer(model, lr=1e-3)
    run_dir = tmp_path / "run"
    for step in (10, 20, 30):
        save_checkpoint(run_dir, step, model, optimizer, None, data_state={}, keep_last=2)
    # A crash in the middle of saving step 40 leaves only a hidden temp folder.
    crashed = run_dir / "checkpoints" / ".step_000040.abc123"
    crashed.mkdir()
    (crashed / "config.json").write_text("{}")
    assert latest_checkpoint(run_dir).name == "step_000030"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if not p.name.startswith(".")) == [
        "step_000020",
        "step_000030",
    ]
    save_checkpoint(run_dir, 40, model, optimizer, None, data_state={}, keep_last=2)
    assert not crashed.exists() and latest_checkpoint(run_dir).name == "step_000040"


def test_no_checkpoint_yet_means_none(tmp_path):
    assert latest_checkpoint(tmp_path / "new_run") is None


def test_resuming_into_a_different_architecture_is_refused(tmp_path):
    model = small_model()
    folder = save_checkpoint(tmp_path / "run", 1, model, build_optimizer(model, lr=1e-3), None, data_state={})
    wider = small_model(hidden_size=96)
    with pytest.raises(NemotronError, match="different architecture.*hidden_size: checkpoint 64 vs model 96"):
        load_checkpoint(folder, wider)


def test_an_incomplete_checkpoint_folder_is_refused(tmp_path):
    model = small_model()
    folder = save_checkpoint(tmp_path / "run", 1, model, build_optimizer(model, lr=1e-3), None, data_state={})
    (folder / "trainer_state.pt").unlink()
    with pytest.raises(NemotronError, match="incomplete.*trainer_state.pt"):
        load_checkpoint(folder, model)


# ---- metrics -------------------------------------------------------------------------------------


class RecordingTracker:
    """A LineageTracker (the protocol in nemotron.trackers) that keeps what it is given."""

    run_id = "recording"

    def __init__(self):
        self.metrics = []

    def log_metrics(self, metrics, step=None):
        self.metrics.append((step, metrics))


def test_metrics_log_writes_jsonl_forwards_to_the_tracker_and_resumes_without_duplicates(tmp_path):
    from nemotron.trackers import set_lineage_tracker

    tracker = set_lineage_tracker(RecordingTracker())
    path = tmp_path / "metrics.jsonl"
    log = MetricsLog(path)
    for step in (1, 2, 3, 4):
        log.log(step, {"loss": torch.tensor(5.0 - step), "lr": 0.1})
    assert read_metrics(path)[1] == {"step": 2, "loss": 3.0, "lr": 0.1}
    assert tracker.metrics[0] == (1, {"loss": 4.0, "lr": 0.1})

    resumed = MetricsLog(path, resume_step=2)  # the checkpoint was at step 2; steps 3-4 are redone
    for step in (3, 4):
        resumed.log(step, {"loss": 5.0 - step, "lr": 0.1})
    assert [record["step"] for record in read_metrics(path)] == [1, 2, 3, 4]
