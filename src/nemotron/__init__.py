"""nemotron: readable, reproducible recipes for Nemotron-style language models."""
from nemotron.cpu import apply_cpu_policy

__version__ = "0.1.0"
apply_cpu_policy()  # before any step imports torch: how its threads wait on a shared CPU (nemotron/cpu.py)
