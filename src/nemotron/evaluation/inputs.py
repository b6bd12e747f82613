"""What an evaluation step reads: a checkpoint's model folder, and the artifacts it was made from.

- `load_model(model_dir)` -> (model, tokenizer): the Hugging Face folder a training step saved, loaded the
  way any user would load it (`AutoModelForCausalLM.from_pretrained`, `AutoTokenizer`), in float32 and
  eval mode. Evaluating through the public loading path is the point: a number we report is a number
  anyone gets from the folder alone, with nothing of ours in between.
- `load_upstream(cls, ...)`: an input that the evaluated checkpoint was made from (its dataset, the
  model it was fine-tuned from). An evaluation must score the held-out split of the very data the
  checkpoint was trained on, so it looks, in order, at:
    1. an explicit `--<name>-path` or `--<name>-artifact`;
    2. the artifacts on stdin, when the checkpoint itself came down the pipe
       (`data_curation | training | evaluation` passes every artifact through);
    3. the lineage: the `inputs` the checkpoint (or another given artifact) recorded when it was saved.
  Stdin is only consulted once the pipe has been read for the checkpoint, so a step given paths never
  waits on a terminal or an idle pipe. An input found in the lineage must still have the digest that
  was recorded: if it was re-made since, the held-out split may have moved into training, and the step
  refuses. An input given explicitly that differs from the recorded one is allowed but warned about.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch

from nemotron.artifact import Artifact, read_stdin_artifacts
from nemotron.errors import NemotronError
from nemotron.training.distributed import torch_threads

A = TypeVar("A", bound=Artifact)


def load_model(model_dir: Path | str) -> tuple[torch.nn.Module, object]:
    """(model in float32 eval mode, tokenizer) from a Hugging Face folder, offline."""
    from transformers import AutoModelForCausalLM  # import late: transformers takes seconds to import

    from nemotron.data_prep.tokenizer import load_tokenizer

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise NemotronError(
            f"{model_dir}: no config.json, so this is not a Hugging Face model folder; pass the checkpoint "
            "artifact a training step saved"
        )
    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError) as error:
        raise NemotronError(f"{model_dir}: cannot load the model: {str(error).splitlines()[0]}") from None
    tokenizer = load_tokenizer(model_dir)
    if len(tokenizer) > model.config.vocab_size:
        raise NemotronError(
            f"{model_dir}: the tokenizer has {len(tokenizer)} tokens but the model embeds only "
            f"{model.config.vocab_size}; the folder mixes a tokenizer and a model that do not belong together"
        )
    return model.eval(), tokenizer


def load_upstream(
    cls: type[A],
    *,
    path: Path | None,
    reference: str | None,
    scale: str,
    made_from: Sequence[Artifact],
    stdin: bool,
    flag: str = "--<input>-path",
) -> A:
    """The `cls` artifact behind `made_from`: explicit path/reference, else stdin, else recorded lineage.

    `stdin=True` says the pipe has already been read (the checkpoint came from it), so looking there
    cannot block. `made_from` are searched in order for an input of type `cls`. `flag` is the step's
    command-line flag for this input, named in error messages.
    """
    name = cls.type_name()
    recorded = [ref for art in made_from for ref in art.inputs if ref.type == name]
    if path is not None or reference is not None:
        found = cls.load(path=path, reference=reference, scale=scale)
    elif stdin and name in read_stdin_artifacts(needed=f"a {name}"):
        found = cls.load(scale=scale)
    elif recorded:
        ref = recorded[0]
        found = cls.load(path=ref.path, scale=scale)
        if ref.digest is not None and found.digest != ref.digest:
            raise NemotronError(
                f"{ref.path}: this {name} was re-made after {made_from[0].path} was trained on it (digest "
                f"{(found.digest or '')[:12]} != recorded {ref.digest[:12]}); re-run training, or pass the "
                f"{name} to use explicitly with {flag}"
            )
        return found
    else:
        where = ", ".join(str(art.path) for art in made_from)
        raise NemotronError(
            f"no {name} given and none recorded in the inputs of {where}; pass its folder with {flag}"
        )
    if recorded and all(ref.digest not in (None, found.digest) for ref in recorded):
        print(
            f"warning: {found.path} is not the {name} recorded in the lineage of {made_from[0].path}; "
            "its held-out split may overlap what the model was trained on",
            file=sys.stderr,
        )
    return found


@contextmanager
def evaluation_threads(scale: str, num_threads: int | None = None) -> Iterator[int]:
    """Run the block with the torch thread count `torch_threads` chooses; the previous count is restored."""
    previous = torch.get_num_threads()
    chosen = torch_threads(scale, num_threads)
    torch.set_num_threads(chosen)
    try:
        yield chosen
    finally:
        torch.set_num_threads(previous)
