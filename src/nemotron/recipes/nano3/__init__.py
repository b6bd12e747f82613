"""The nano3 recipe: a hybrid Mamba-Transformer mixture-of-experts (Nemotron 3 Nano), pretrained and
compared with a dense model of the same active size (see README.md)."""
