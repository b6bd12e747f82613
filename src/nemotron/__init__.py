"""nemotron: readable, reproducible recipes for Nemotron-style language models."""
__version__ = "0.1.0"
