"""The data library: sources, blends, filters, dedup, tokenizers, chat templates, bin/idx, packing,
receipted shard runs on a local pool or Ray, local or object-store storage.

The library API in four names (the rest lives in the submodules, see README.md's layout):

    from nemotron.data_prep import DataBlend, run_pretrain_pipeline, run_rl_pipeline, run_sft_pipeline

and the design's name for the RL call that normalizes its records, `run_rl_resolve_pipeline`.

They are loaded on first use, so importing a submodule (as every pool or Ray worker does) stays cheap.
"""

from __future__ import annotations

__all__ = ["DataBlend", "run_pretrain_pipeline", "run_rl_pipeline", "run_rl_resolve_pipeline", "run_sft_pipeline"]


def __getattr__(name: str):
    if name == "DataBlend":
        from nemotron.data_prep.blend import DataBlend

        return DataBlend
    if name in ("run_pretrain_pipeline", "run_rl_pipeline", "run_rl_resolve_pipeline", "run_sft_pipeline"):
        from nemotron.data_prep import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'nemotron.data_prep' has no attribute {name!r}")
