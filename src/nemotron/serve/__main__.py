"""Serve checkpoints behind an OpenAI-compatible API and a chat page, on 127.0.0.1, offline.

    python -m nemotron.serve                                            # SmolLM2-135M-Instruct (the SDG model)
    python -m nemotron.serve runs/nano2/stage2_alignment/training runs/nano3/stage2_rl/training --port 8011
    python -m nemotron.serve smollm2 --served-model-name smollm2-135m-instruct
    python -m nemotron.serve runs/nano2                                 # every stage of a run: base, SFT, DPO
    python -m nemotron.serve smollm2 --device cuda                      # on the GPU (auto: when there is one)

Each model gets its own engine (`nemotron.serve.engine`): requests to it join and leave its running batch
between decode steps, and one forward pass decodes every running request; each model is loaded once and
chosen by the request's `model`. A run folder (`runs/nano2`) serves the checkpoint of each of its stages, in
stage order, which the page's compare view sets side by side; a request naming no model gets its final one.
Open http://127.0.0.1:PORT/ for the chat page; point any OpenAI client at http://127.0.0.1:PORT/v1.
What the API answers and refuses: `nemotron.serve.app`. The server binds 127.0.0.1 unless told otherwise;
at scale the same clients talk to vLLM, SGLang, NIM or a hosted endpoint instead.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import tyro

from nemotron.cli import run_tool
from nemotron.errors import NemotronError
from nemotron.models.device import DeviceSettings


@dataclass
class Config(DeviceSettings):  # --device (nemotron.models.device)
    """Serve models behind an OpenAI-compatible HTTP API and a chat page on 127.0.0.1. A request that names no
    temperature / top_p is sampled as vLLM would: the model's generation_config.json, else temperature 1 and
    top_p 1 (`nemotron.serve.models.default_sampling`); the page and the terminal chat send greedy explicitly."""

    models: tyro.conf.Positional[tuple[str, ...]] = ("smollm2",)
    """Checkpoint artifact folders, Hugging Face model folders, a recipe's run folder (each stage's checkpoint),
    or `smollm2` (SmolLM2-135M-Instruct)."""
    served_model_name: str | None = None
    """The model id clients ask for, with one model; default: `smollm2-135m-instruct`, or the recipe and
    stage of a checkpoint (`nano2-stage2_alignment`), or the folder's name."""
    host: str = "127.0.0.1"
    """Interface to bind; loopback only unless you mean otherwise."""
    port: int = 8000
    """TCP port."""
    max_batch_size: int = 16
    """Most requests decoded together in one forward pass; more wait until a running one ends. Each holds a
    cache row (/v1/models' `cache`: bytes per row and per token); a request is refused (400) when this many
    rows of its length would not fit the memory kept for caches (half the free RAM, 90% of a GPU's free)."""
    num_threads: int = 1
    """torch CPU threads. 1 by default: batching already fills a core, and on a busy 2-core machine two
    threads spin against each other (measured: 0.73 s per decode step with 2 threads, 0.15 s with 1)."""
    seed: int = 0
    """Seed for requests that send none (request i gets seed + i)."""


def main(config: Config) -> None:
    import torch
    import uvicorn

    from nemotron.models.device import device_name, pick_device
    from nemotron.serve.app import create_app
    from nemotron.serve.engine import Engine
    from nemotron.serve.models import expand_run, load_served

    device = pick_device(config.device)  # a --device cuda without a GPU is refused before any model loads
    specs = [found for spec in config.models for found in expand_run(spec)]
    if config.served_model_name and len(specs) != 1:
        raise NemotronError(f"--served-model-name names one model, but {len(specs)} are served; "
                            "drop it (each gets its own name)")
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    started = time.perf_counter()
    served = []
    for spec in specs:
        model = load_served(spec, config.served_model_name, device)
        if model.name in {m.name for m, _ in served}:
            raise NemotronError(f"two models are named {model.name!r}; serve them from two servers")
        served.append((model, Engine(model.model, model.tokenizer, max_batch_size=config.max_batch_size,
                                     stop_token_ids=model.stop_token_ids)))
    app = create_app(served, seed=config.seed)
    names = ", ".join(f"{m.name} ({m.format})" for m, _ in served)
    print(f"serve: {names} loaded on {device_name(device)} in {time.perf_counter() - started:.1f}s; chat page at "
          f"http://{config.host}:{config.port}/ , OpenAI-compatible API at http://{config.host}:{config.port}/v1",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning")


if __name__ == "__main__":
    run_tool(main)
