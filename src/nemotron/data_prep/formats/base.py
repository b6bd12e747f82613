"""The one interface every output format implements (see `__init__.py` for the registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ShardInput:
    """What one shard's writer reads: its non-blank input lines, and how to name a bad one."""

    lines: Callable[[], Iterator[tuple[int, bytes]]]  # (byte offset, line) of every non-blank line
    where: str  # the input, as error messages name it
    text_field: str = "text"
    line_number: Callable[[int], int] = lambda offset: 0  # 1-based line of a byte offset (errors only)
    dtype: str = ""  # token dtype (bin_idx)
    eos_id: int = -1
    options: dict = field(default_factory=dict)  # the format's parameters


class ShardFormat:
    """One output format. Subclasses set the class attributes and implement `write`."""

    name: str = ""
    suffixes: tuple[str, ...] = ()  # the files one shard may write, e.g. (".bin", ".idx")
    needs_tokenizer: bool = True
    needs_eos: bool = False  # refuse a tokenizer without an EOS token (documents must be separable)
    indexed: bool = False  # its shards are Megatron bin/idx prefixes

    def check_options(self, options: dict[str, Any]) -> None:
        """Refuse bad parameters before any work starts (the driver calls this when planning)."""

    def token_dtype(self, vocab_size: int) -> str:
        """The dtype of the tokens it stores ("" when it stores none)."""
        return ""

    def setup_payload(self, tokenizer_json: str, tokenizer_dir: Path | None) -> Any:
        """A small picklable payload from which a worker builds its state once (`setup`)."""
        return None

    def setup(self, payload: Any) -> Any:
        """The per-worker state (a tokenizer), built once per process from `setup_payload`'s result."""
        return None

    def write(self, shard: ShardInput, state: Any, folder: Path, name: str) -> tuple[list[str], dict[str, int]]:
        """Write shard `name` into `folder` (each file atomically); returns (file names, counts)."""
        raise NotImplementedError
