"""Byte sizes as people write them: `work_item_bytes="256MB"` as well as `work_item_bytes=268435456`.

`parse_size` takes an int (bytes) or a string: a number, optionally with a decimal point, then a unit:
B; KB, MB, GB, TB (powers of 1000, as the SI and disk makers count); KiB, MiB, GiB, TiB (powers of 1024,
as memory is counted: the default `WORK_ITEM_BYTES` is 64 MiB). Units ignore case and a space before
them; "256M" means 256 MB. Every library call that takes a byte size passes it through `parse_size`.
"""

from __future__ import annotations

import re

from nemotron.errors import NemotronError

UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
         "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")


def parse_size(value: int | str, name: str = "size") -> int:
    """`value` in bytes (see the module docstring); refuses, naming `name`, what is not a size of >= 1 byte."""
    if isinstance(value, bool):
        raise NemotronError(f"{name}={value!r} is not a byte size; give bytes (65536) or a size string ('256MB')")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(str(value).lower())
        if match is None or match[2] not in UNITS:
            raise NemotronError(f"{name}={value!r} is not a byte size: write a number and one of "
                                "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB (e.g. '256MB', '64MiB')")
        size = int(float(match[1]) * UNITS[match[2]])
    if size < 1:
        raise NemotronError(f"{name}={value!r} must be at least 1 byte")
    return size
