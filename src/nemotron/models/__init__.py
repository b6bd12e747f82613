"""Model definitions per scale. `nano2`: the Nemotron Nano 2 hybrid Mamba-Transformer family."""

from nemotron.models.nano2 import SCALES, VOCAB_SIZES, build_config, build_model, count_parameters

__all__ = ["SCALES", "VOCAB_SIZES", "build_config", "build_model", "count_parameters"]
