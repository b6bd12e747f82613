"""Shared test builders: real tiny inputs (tokenizers, models, checkpoint artifacts) that several test
modules need. Import them with `from builders import ...` (tests/ is on sys.path under pytest)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from nemotron.data_prep.chat.nano2 import NANO2_CHAT_TEMPLATE
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.recipes.nano2.artifacts import PretrainCheckpoint

# The nano2 tiny shape, narrowed so a test trains it in seconds.
SMALL_MODEL = dict(hidden_size=48, intermediate_size=96, mamba_num_heads=2, mamba_head_dim=48, head_dim=24,
                   num_attention_heads=2, num_key_value_heads=1, ssm_state_size=8, chunk_size=32)


def chatterbot_texts() -> list[str]:
    from nemotron.data_prep.sources import read_chatterbot

    conversations, _ = read_chatterbot()
    return ["\n".join(m["content"] for m in c["messages"]) for c in conversations]


def save_tokenizer_without_chat_tokens(folder: Path) -> None:
    """A byte-level BPE with pad/bos/eos but no <|im_start|>/<|im_end|>: a plain pretraining tokenizer."""
    from tokenizers import pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from nemotron.data_prep.tokenizer import build_bpe_tokenizer

    tokenizer = build_bpe_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(chatterbot_texts(), trainer=trainer)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        chat_template=NANO2_CHAT_TEMPLATE,
    ).save_pretrained(str(folder))


def make_pretrain_checkpoint(
    root: Path, scale: str = "tiny", chat_tokens: bool = True, chat_template: bool = True
) -> PretrainCheckpoint:
    """A PretrainCheckpoint whose model_dir holds a real tokenizer and a real (untrained) nano2 model."""
    from nemotron.data_prep.tokenizer import train_tokenizer
    from nemotron.models.nano2 import build_config, build_model

    model_dir = root / "model"
    if chat_tokens:
        train_tokenizer(
            chatterbot_texts(), 1024, model_dir, chat_template=NANO2_CHAT_TEMPLATE if chat_template else None
        )
    else:
        save_tokenizer_without_chat_tokens(model_dir)
    vocab_size = len(load_tokenizer(model_dir))
    build_model(build_config("tiny", vocab_size), seed=0).save_pretrained(str(model_dir))
    (root / "metrics.jsonl").write_text('{"loss": 6.0, "step": 1}\n')
    return PretrainCheckpoint(
        path=root, scale=scale, model_dir=model_dir, metrics_path=root / "metrics.jsonl",
        training_loss=6.0, validation_loss=None, steps=1,
    ).save()


def write_plays_blend(folder: Path, plays: set[str], split: list[float]) -> Path:
    """The scenes of some Shakespeare plays as `scenes.jsonl` and a blend file naming it, in `folder`: a user's
    own small blend for the stage-0 curation (`--blend-path`). Returns the blend file's path."""
    from nemotron.data_prep.sources import read_shakespeare

    scenes = [d for d in read_shakespeare().documents if d.meta.get("play") in plays]
    (folder / "scenes.jsonl").write_text("".join(json.dumps({"id": d.id, "text": d.text}) + "\n" for d in scenes))
    (folder / "blend.json").write_text(json.dumps({"sources": [{"path": "scenes.jsonl"}], "split": split}))
    return folder / "blend.json"


def curate_two_plays_nano3(blend_folder: Path, output_dir: Path, scale: str = "tiny"):
    """nano3's stage-0 data curation over Hamlet and Macbeth (the nano3 chat template): the real
    PretrainDataset the nano3 tests train on (small at every scale: the corpus is two plays)."""
    from nemotron.recipes.nano3.stage0_pretrain import data_curation

    blend = write_plays_blend(blend_folder, {"hamlet", "macbeth"}, [0.8, 0.2, 0])
    return data_curation.main(data_curation.Config(
        blend_path=blend, vocab_size=512, num_shards=2, workers=1, scale=scale, output_dir=output_dir))


def make_chat_checkpoint(root: Path, artifact_class, family: str = "nano2"):
    """A chat checkpoint artifact of `artifact_class` (e.g. DPOCheckpoint, Nano3RLCheckpoint) holding a real
    tokenizer with the `family` chat template and a real untrained `family` model: what the chat command
    and the server load, built in seconds (training it would only change the weights)."""
    from nemotron.data_prep.chat.templates import chat_template_named
    from nemotron.data_prep.tokenizer import train_tokenizer
    from nemotron.models import nano2, nano3
    from nemotron.models.hybrid import build_model

    model_dir = root / "model"
    train_tokenizer(chatterbot_texts(), 1024, model_dir, chat_template=chat_template_named(family).jinja)
    config = (nano2 if family == "nano2" else nano3).build_config("tiny", len(load_tokenizer(model_dir)))
    build_model(config, seed=0).save_pretrained(str(model_dir))
    (root / "metrics.jsonl").write_text('{"loss": 1.0, "step": 1}\n')
    return artifact_class(path=root, model_dir=model_dir, metrics_path=root / "metrics.jsonl", training_loss=1.0,
                          validation_loss=None, steps=1).save()


def docs_and_chats(root: Path, texts: list[str], chats: list[dict]) -> dict:
    """`docs.jsonl` (one document per text), `chats.jsonl` and a 600-token BPE with the nano2 template over
    both, under `root`: the inputs of the data-prep pipeline tests."""
    (root / "docs.jsonl").write_text("".join(json.dumps({"id": f"d{n}", "text": t}) + "\n"
                                             for n, t in enumerate(texts)))
    (root / "chats.jsonl").write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    tokenizer = train_tokenizer(texts + [m["content"] for c in chats for m in c["messages"]], 600, root / "tokenizer",
                                chat_template=NANO2_CHAT_TEMPLATE)
    return {"root": root, "tokenizer": tokenizer}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under a run folder (hidden temp files included), by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def descendant_processes(title: str) -> list[psutil.Process]:
    """Processes started under this one (a test's own Ray) whose command line holds `title`."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if title in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:
            continue
    return found
