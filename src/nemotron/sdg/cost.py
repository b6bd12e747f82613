"""The compute bill of synthetic data, and the arithmetic of inference efficiency.

Generating a token costs about 2 x N_active FLOPs (a multiply and an add per active weight; Kaplan et
al. 2020), prompt tokens included (prefill does the same matrix products). So a run's FLOPs are
2 x active parameters x (prompt + completion tokens), whatever the server. GPU-hours follow from a
stated peak and a stated model FLOPs utilization (MFU): decode-heavy serving reaches far below the
peak, because a decode step reads every weight to produce one token per sequence.

- `bill(tokens_by_strategy, documents, ...)`: per strategy and in total, for each rephraser (a dense
  8B and a 30B-A3B mixture of experts: 30B weights in memory, 3B active per token), FLOPs, GPU-hours
  at the stated MFU, bf16 weight memory (2 bytes per parameter, every expert included), and the
  projections to 10x / 100x / 1000x the documents (token counts scale with documents).
- `effective_mfu(active_params, tokens_per_second, peak_flops, devices)`: what a measured throughput means, for
  any server: 2 x active parameters x tokens/s over the peak of the devices it runs on (`devices` x `peak_flops`).
- `critical_batch_size(peak_flops, memory_bandwidth, bytes_per_param)`: the decode batch at which a
  step stops being memory-bound. One decode step over a batch of B reads the weights once
  (bytes_per_param x N bytes) and does 2 x N x B FLOPs: arithmetic intensity 2B / bytes_per_param
  FLOPs per byte. The machine balance is peak FLOPs / bandwidth; below B* = balance x bytes / 2 the
  GPU waits on memory, which is why batching concurrent requests is nearly free throughput.
"""

from __future__ import annotations

from dataclasses import dataclass

BF16_BYTES = 2
PROJECTIONS = (10, 100, 1000)


@dataclass(frozen=True)
class Rephraser:
    name: str
    total_params: float  # every weight (memory)
    active_params: float  # weights used per token (compute)


DENSE_8B = Rephraser("dense-8B", 8e9, 8e9)
MOE_30B_A3B = Rephraser("moe-30B-A3B", 30e9, 3e9)

# Stated hardware: NVIDIA H100 SXM, dense bf16 tensor-core peak and HBM3 bandwidth (datasheet).
H100_BF16_FLOPS = 989e12
H100_BANDWIDTH = 3.35e12  # bytes/s
SERVING_MFU = 0.10  # stated assumption for decode-heavy batched serving; set your measured one


def flops(active_params: float, tokens: int) -> float:
    return 2.0 * active_params * tokens


def gpu_hours(total_flops: float, peak_flops: float, mfu: float) -> float:
    return total_flops / (peak_flops * mfu) / 3600.0


def effective_mfu(active_params: float, tokens_per_second: float, peak_flops: float, devices: int = 1) -> float:
    """The model FLOPs utilization of a measured throughput on `devices` devices of `peak_flops` each."""
    return flops(active_params, 1) * tokens_per_second / (peak_flops * devices)


def critical_batch_size(peak_flops: float, memory_bandwidth: float, bytes_per_param: float = BF16_BYTES) -> float:
    machine_balance = peak_flops / memory_bandwidth  # FLOPs the chip can do per byte it reads
    return machine_balance * bytes_per_param / 2.0


def bill(tokens_by_strategy: dict[str, dict[str, int]], documents: int, *,
         rephrasers: tuple[Rephraser, ...] = (DENSE_8B, MOE_30B_A3B),
         peak_flops: float = H100_BF16_FLOPS, mfu: float = SERVING_MFU, measured: dict | None = None) -> dict:
    """The bill of this run's measured tokens ({strategy: {"prompt_tokens", "completion_tokens"}}); `measured`:
    the MFU this run's endpoint reached (`SyntheticDataset.metrics["throughput"]`'s), beside the stated one."""
    rows = dict(tokens_by_strategy)
    rows["total"] = {key: sum(t[key] for t in tokens_by_strategy.values())
                     for key in ("prompt_tokens", "completion_tokens")}
    out: dict = {"documents": documents, "peak_flops": peak_flops, "mfu": mfu,
                 "assumptions": f"2 x active params FLOPs per token (prompt + completion); {mfu:.0%} MFU of "
                                f"{peak_flops / 1e12:.0f} TFLOP/s bf16 (H100 SXM); bf16 weights",
                 "rephrasers": {r.name: {"total_params": r.total_params, "active_params": r.active_params,
                                         "bf16_weight_gb": r.total_params * BF16_BYTES / 1e9} for r in rephrasers},
                 "strategies": {}}
    for name, tokens in rows.items():
        total_tokens = tokens["prompt_tokens"] + tokens["completion_tokens"]
        entry: dict = {**tokens, "tokens": total_tokens}
        for r in rephrasers:
            run_flops = flops(r.active_params, total_tokens)
            entry[r.name] = {"flops": run_flops, "gpu_hours": gpu_hours(run_flops, peak_flops, mfu),
                             "projected_gpu_hours": {f"{x}x": gpu_hours(run_flops * x, peak_flops, mfu)
                                                     for x in PROJECTIONS}}
        out["strategies"][name] = entry
    out["critical_batch_size_h100_bf16"] = critical_batch_size(H100_BF16_FLOPS, H100_BANDWIDTH)
    if measured:
        out["measured"] = measured
    return out


def format_bill(bill_: dict) -> str:
    """The bill as a table for stderr."""
    names = list(bill_["rephrasers"])
    header = f"{'strategy':<20} {'tokens in':>10} {'tokens out':>10}"
    for n in names:
        header += f" | {n + ' FLOPs':>18} {'GPU-h':>9} {'x10':>9} {'x100':>9} {'x1000':>9}"
    lines = [f"compute bill for {bill_['documents']} documents ({bill_['assumptions']})", header, "-" * len(header)]
    for strategy, entry in bill_["strategies"].items():
        line = f"{strategy:<20} {entry['prompt_tokens']:>10,} {entry['completion_tokens']:>10,}"
        for n in names:
            cost = entry[n]
            p = cost["projected_gpu_hours"]
            line += (f" | {cost['flops']:>18.3e} {cost['gpu_hours']:>9.2e} {p['10x']:>9.2e} {p['100x']:>9.2e} "
                     f"{p['1000x']:>9.2e}")
        lines.append(line)
    memory = ", ".join(f"{n} {r['bf16_weight_gb']:.0f} GB" for n, r in bill_["rephrasers"].items())
    lines.append(f"bf16 weight memory: {memory}; decode critical batch size on H100 (bf16): "
                 f"{bill_['critical_batch_size_h100_bf16']:.0f}")
    if "measured" in bill_:
        m = bill_["measured"]
        lines.append(f"measured on this endpoint: MFU {m['effective_mfu_concurrent']:.2%} concurrent, "
                     f"{m['effective_mfu_sequential']:.2%} sequential (2 x {m['active_params']:.3g} active params x "
                     f"tokens/s over {max(1, m['num_gpus'])} x {m['peak_flops']:.3g} FLOP/s)")
    return "\n".join(lines)
