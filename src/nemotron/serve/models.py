"""What the server and the terminal chat serve: a checkpoint artifact, a Hugging Face folder, or SmolLM2.

`load_served(spec, device=...)` -> `ServedModel`: the model (on `device`, the CPU unless told), its tokenizer,
the id clients ask for, and how a chat becomes the prompt the model was trained on. `spec` is
- a checkpoint artifact folder a training step wrote (`runs/nano2/stage2_alignment/training`): its
  `model_dir` is loaded; a pretrain checkpoint (type `*pretraincheckpoint`) is a base model, served
  for plain completion only (it never learnt the chat format, even though its tokenizer carries one);
- a Hugging Face model folder (config.json, weights, tokenizer);
- `smollm2`: SmolLM2-135M-Instruct, the SDG reference model (`nemotron.models.reference`).

The chat format is the checkpoint's own, never guessed: the Jinja template saved with its tokenizer
(data curation puts it there, and every later step copies the tokenizer). When that text is our
nano2 or nano3 template, the prompt is tokenized piece by piece by the same functions that made the
training data (`nemotron.data_prep.chat.nano2.tokenize_prompt`, `chat.nano3.tokenize_nano3_prompt`),
so the model sees at inference exactly the tokens it was trained on; any other template (SmolLM2's)
is rendered by `tokenizer.apply_chat_template`. nano3 reasons: its generation prompt opens `<think>\\n`
(or closes it at once with `enable_thinking=False`), and its completions are split into reasoning and
answer (`nemotron.serve.reasoning`).

`expand_run(spec)`: a recipe's run folder as its stages' checkpoints, so one server compares them.

`newest_chat_checkpoint(root)`: the chat command's default, the most recently written chat checkpoint
under `runs/`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nemotron.artifact import read_metadata
from nemotron.errors import NemotronError

FORMATS = ("nano2", "nano3", "jinja", "completion")  # how a chat becomes a prompt; completion: no chat
# A request that names no temperature / top_p is sampled as vLLM samples it: with what the model's
# generation_config.json declares, else these (OpenAI's API defaults too). Clients rely on it: greedy decoding
# of a small model loops (SmolLM2 with a JSON schema writes `"tags": ["new", "new", ...]` until max_tokens).
# The chat page and the terminal chat send their own setting, greedy, explicitly.
FALLBACK_SAMPLING = {"temperature": 1.0, "top_p": 1.0}
# Formats whose recipe trains on one user turn per conversation: nano3's SFT and RL stages (a question, its
# reasoning and answer). Chatted with one turn at a time by default, since earlier turns only confuse them.
SINGLE_TURN_FORMATS = ("nano3",)


@dataclass
class ServedModel:
    name: str  # the id clients ask for (`GET /v1/models`)
    model: Any
    tokenizer: Any
    format: str  # one of FORMATS
    identity: dict = field(default_factory=dict)  # what it is: artifact type, path, digest; or files' sha256
    sampling: dict = field(default_factory=lambda: default_sampling(None))  # a request's defaults (`default_sampling`)

    @property
    def reasons(self) -> bool:
        """True when the model writes a reasoning trace before its answer (nano3)."""
        return self.format == "nano3"

    @property
    def single_turn(self) -> bool:
        """True when the model was trained on single-turn conversations (`SINGLE_TURN_FORMATS`)."""
        return self.format in SINGLE_TURN_FORMATS

    @property
    def stop_token_ids(self) -> list[int]:
        """The end of an assistant turn (`<|im_end|>`) ends a completion, as in the recipes' evaluations."""
        if self.format not in ("nano2", "nano3"):
            return []
        from nemotron.data_prep.chat.pieces import marker_ids
        from nemotron.data_prep.tokenizer import IM_END_TOKEN

        return [marker_ids(self.tokenizer)[IM_END_TOKEN]]

    def prompt_ids(self, messages: list[dict], enable_thinking: bool = True) -> list[int]:
        """The token ids the model continues to write the next assistant turn of `messages`."""
        if self.format == "completion":
            raise NemotronError(f"model {self.name!r} is a base model without a chat format; "
                                "send a raw prompt to /v1/completions instead")
        if self.format == "nano2":
            from nemotron.data_prep.chat.nano2 import tokenize_prompt, validate_conversation

            validate_conversation(messages)
            return tokenize_prompt(self.tokenizer, messages)
        if self.format == "nano3":
            from nemotron.data_prep.chat.nano3 import tokenize_nano3_prompt, validate_nano3_conversation

            validate_nano3_conversation(messages)
            return tokenize_nano3_prompt(self.tokenizer, messages, enable_thinking=enable_thinking)
        try:
            rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as error:  # jinja raises TemplateError for what the template refuses
            raise NemotronError(f"the chat template of {self.name!r} refused the messages: "
                                f"{str(error).splitlines()[0]}") from None
        return list(self.tokenizer(rendered, add_special_tokens=False)["input_ids"])

    def text_ids(self, text: str) -> list[int]:
        """`text` as tokens inside a turn (an assistant message being continued), tokenized as the chat data
        tokenizes a message's content: nothing added, a special token's text split as plain text."""
        from nemotron.data_prep.chat.pieces import encode_text

        return list(encode_text(self.tokenizer, [text])[0])

    def completion_ids(self, prompt: str) -> list[int]:
        return list(self.tokenizer(prompt)["input_ids"])


def chat_format(tokenizer: Any) -> str:
    """Which format the tokenizer's saved template is: ours by its exact text, another one, or none."""
    from nemotron.data_prep.chat.templates import CHAT_TEMPLATES

    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return "completion"
    return {known.jinja: name for name, known in CHAT_TEMPLATES.items()}.get(template, "jinja")


def default_sampling(folder: Path | None) -> dict:
    """The temperature and top_p of a request that names none, as vLLM picks them: those the model folder's
    generation_config.json declares, else `FALLBACK_SAMPLING`; `from` says which."""
    path = None if folder is None else Path(folder) / "generation_config.json"
    declared = {}
    if path is not None and path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise NemotronError(f"{path} is not JSON ({error}); fix or delete it") from None
        declared = {k: float(config[k]) for k in FALLBACK_SAMPLING if isinstance(config.get(k), (int, float))}
    source = "generation_config.json" if declared else "fallback (vLLM's and OpenAI's: temperature 1, top_p 1)"
    return {**FALLBACK_SAMPLING, **declared, "from": source}


def is_base_checkpoint(artifact_type: str) -> bool:
    """Pretrain checkpoints (nano2's `pretraincheckpoint`, nano3's `nano3pretraincheckpoint`) are base models."""
    return artifact_type.endswith("pretraincheckpoint")


def load_served(spec: str | Path, name: str | None = None, device: Any = "cpu") -> ServedModel:
    """Load what `spec` names (see the module docstring), offline, in float32 eval mode, onto `device` (a
    `torch.device` or its name: `nemotron.models.device.pick_device` turns `--device` into one)."""
    from nemotron.models.loading import load_model
    from nemotron.models.reference import SMOLLM2, load_reference_model, reference_identity

    if str(spec) == SMOLLM2:
        from nemotron.models.reference import smollm2_folder

        model, tokenizer = load_reference_model(SMOLLM2)
        return ServedModel(name or "smollm2-135m-instruct", model.to(device), tokenizer, chat_format(tokenizer),
                           reference_identity(SMOLLM2), default_sampling(smollm2_folder()))
    folder = Path(spec)
    if (folder / "metadata.json").is_file():
        meta = read_metadata(folder)
        if "model_dir" not in meta:
            raise NemotronError(f"{folder} is a {meta.get('type')!r} artifact, not a model checkpoint; pass the "
                                "folder of a training step (e.g. runs/nano2/stage2_alignment/training)")
        model, tokenizer = load_model(meta["model_dir"])
        kind = "completion" if is_base_checkpoint(meta.get("type", "")) else chat_format(tokenizer)
        identity = {"artifact": meta.get("type"), "path": str(folder.resolve()), "digest": meta.get("digest")}
        return ServedModel(name or _artifact_name(folder), model.to(device), tokenizer, kind, identity,
                           default_sampling(meta["model_dir"]))
    if (folder / "config.json").is_file():
        model, tokenizer = load_model(folder)
        return ServedModel(name or folder.resolve().name, model.to(device), tokenizer, chat_format(tokenizer),
                           {"path": str(folder.resolve())}, default_sampling(folder))
    raise NemotronError(f"{spec}: not a checkpoint artifact (metadata.json), not a Hugging Face model folder "
                        f"(config.json) and not {SMOLLM2!r}; pass what a training step wrote")


def _artifact_name(folder: Path) -> str:
    """`nano2/stage2_alignment/training` -> `nano2-stage2_alignment`: the recipe and stage a run folder names."""
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-1] == "training":
        return f"{parts[-3]}-{parts[-2]}"
    return parts[-1]


def expand_run(spec: str) -> list[str]:
    """A recipe's run folder (`runs/nano2`) -> its stages' checkpoints in stage order (`stage0_pretrain/training`,
    `stage1_sft/training`, ...); any other spec stays itself. What `python -m nemotron.serve runs/nano2` serves."""
    folder = Path(spec)
    if not folder.is_dir() or (folder / "metadata.json").is_file() or (folder / "config.json").is_file():
        return [spec]
    found = []
    for meta_path in sorted(folder.glob("*/training/metadata.json")):
        try:
            meta = read_metadata(meta_path.parent)
        except NemotronError:
            continue
        if isinstance(meta, dict) and "model_dir" in meta:
            found.append(str(meta_path.parent))
    return found or [spec]


def newest_chat_checkpoint(root: str | Path = "runs") -> Path:
    """The chat checkpoint (not a pretrain one) under `root` whose metadata.json was written last."""
    found = []
    for meta_path in Path(root).rglob("metadata.json"):
        try:
            meta = read_metadata(meta_path.parent)
        except NemotronError:
            continue
        if isinstance(meta, dict) and "model_dir" in meta and not is_base_checkpoint(meta.get("type", "")):
            found.append((meta_path.stat().st_mtime, meta_path.parent))
    if not found:
        raise NemotronError(f"no chat checkpoint under {Path(root).resolve()}; run a recipe first (make demo) "
                            "or pass a checkpoint folder: python -m nemotron.chat runs/nano2/stage1_sft/training")
    return max(found)[1]
