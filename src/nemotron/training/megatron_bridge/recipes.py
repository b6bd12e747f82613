"""Which Megatron-Bridge recipe trains which of our model families, and the facts to check a run against.

`run_folder.write_run_folder` writes run folders; this module holds what it writes them for:

- `FAMILIES`: per family (nano2, nano3), the recipe module and functions (pretrain, sft) of the
  reference Megatron-Bridge commit, the parallelism those recipes set for the published model, and
  where our shapes live (`nemotron.models.<family>.SCALES`);
- `model_shape(family, scale)`: our shape in Megatron's names (`HYBRID_FIELDS`, plus `MOE_FIELDS` for a
  mixture of experts);
- the facts (`megatron_bridge_facts.json`, extracted from the reference source with ast by
  scripts/extract_megatron_bridge_facts.py): `check_overrides` refuses any override key that is not a
  field of the dataclass it targets, and any value a `Literal` field does not allow, so a run folder
  never carries a typo to the cluster.

Nothing here imports Megatron-Bridge.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from nemotron.errors import NemotronError

FACTS_PATH = Path(__file__).with_name("megatron_bridge_facts.json")
HYBRID_PROVIDER = "megatron.bridge.models.hybrid.hybrid_provider:HybridModelProvider"


@dataclass(frozen=True)
class Family:
    """One model family's Megatron-Bridge recipes: where they live, the parallelism they set for the
    published model, and which of our `nemotron.models.<family>` shape fields map to Megatron names."""

    recipe_module: str
    recipes: dict[str, str]  # kind ("pretrain" | "sft") -> recipe function
    tensor_parallel: int  # what the recipes set at full scale (sequence parallel on when > 1)
    expert_parallel: int  # what the recipes set at full scale; 1 for a model without experts
    model_module: str  # ours: SCALES, COMMON and build_config
    moe: bool  # the shape carries experts (MOE_FIELDS)
    sft_model_class: str | None = None  # the SFT recipe's model dataclass, when the facts cannot name it


# Megatron (HybridModelProvider) name <- our transformers (NemotronHConfig) name, for every family.
HYBRID_FIELDS = {
    "hidden_size": "hidden_size", "ffn_hidden_size": "intermediate_size",
    "num_attention_heads": "num_attention_heads", "num_query_groups": "num_key_value_heads", "kv_channels": "head_dim",
    "mamba_num_heads": "mamba_num_heads", "mamba_head_dim": "mamba_head_dim", "mamba_state_dim": "ssm_state_size",
    "mamba_num_groups": "n_groups", "mamba_chunk_size": "chunk_size",
}
# ... and for a mixture of experts (the mapping nemotron.models.nano3 documents beside its full row).
MOE_FIELDS = {
    "num_moe_experts": "n_routed_experts", "moe_ffn_hidden_size": "moe_intermediate_size",
    "moe_shared_expert_intermediate_size": "moe_shared_expert_intermediate_size",
    "moe_router_topk": "num_experts_per_tok", "moe_router_topk_scaling_factor": "routed_scaling_factor",
    "moe_router_num_groups": "n_group", "moe_router_group_topk": "topk_group",
}
FAMILIES = {
    # nemotron_nano_9b_v2: TP 2 with sequence parallel, the dense hybrid (upstream also exports the
    # functions as nemotron_nano_9b_v2_pretrain_config / ..._sft_config).
    "nano2": Family(
        recipe_module="megatron.bridge.recipes.nemotronh.h100.nemotron_nano_v2",
        recipes={"pretrain": "nemotron_nano_9b_v2_pretrain_2gpu_h100_bf16_config",
                 "sft": "nemotron_nano_9b_v2_sft_2gpu_h100_bf16_config"},
        tensor_parallel=2, expert_parallel=1, model_module="nemotron.models.nano2", moe=False,
    ),
    # Nemotron 3 Nano 30B-A3B: both recipes set TP 1, PP 1, expert parallel 8 (expert TP 1), sequence
    # parallel off: the 128 experts of a layer are spread over 8 GPUs, 16 each. The SFT recipe builds its
    # model with AutoBridge from the published Hugging Face config (config only, no weights: on the
    # cluster that is one Hub download) and casts it to HybridModelProvider, which the facts cannot follow.
    "nano3": Family(
        recipe_module="megatron.bridge.recipes.nemotronh.h100.nemotron_3_nano",
        recipes={"pretrain": "nemotron_3_nano_pretrain_8gpu_h100_bf16_config",
                 "sft": "nemotron_3_nano_sft_8gpu_h100_bf16_config"},
        tensor_parallel=1, expert_parallel=8, model_module="nemotron.models.nano3", moe=True,
        sft_model_class=HYBRID_PROVIDER,
    ),
}


def model_shape(family: str, scale: str) -> dict[str, Any]:
    """Our model shape of `family` at `scale` in Megatron's names (HYBRID_FIELDS, MOE_FIELDS)."""
    import importlib

    models = importlib.import_module(FAMILIES[family].model_module)  # imported here: it pulls in torch
    row = {**getattr(models, "COMMON", {}), **models.SCALES[scale]}
    names = HYBRID_FIELDS | (MOE_FIELDS if FAMILIES[family].moe else {})
    pattern = row["hybrid_override_pattern"]
    return {"hybrid_layer_pattern": pattern, "num_layers": len(pattern),
            **{megatron: row[ours] for megatron, ours in names.items()}}


# ---------------------------------------------------------------------------------------------------
# The facts: what Megatron-Bridge's ConfigContainer accepts (scripts/extract_megatron_bridge_facts.py)
# ---------------------------------------------------------------------------------------------------


@cache
def facts() -> dict[str, Any]:
    return json.loads(FACTS_PATH.read_text())


def class_fields(key: str) -> tuple[dict[str, str], bool]:
    """All fields of a facts class (its bases' too) and whether every base's source was available."""
    classes = facts()["classes"]
    entry = classes[key]
    fields: dict[str, str] = {}
    for base in reversed(entry["bases"]):
        fields.update(class_fields(base)[0])
    fields.update(entry["fields"])
    for name in entry.get("init_false", []):
        fields.pop(name, None)
    return fields, entry["complete"]


def section_class(recipe: str, section: str, known: dict[str, str] | None = None) -> str:
    """The facts class a top-level override section targets for `recipe` (`known`: sections whose class
    the caller knows where the facts name none, e.g. a model built at run time)."""
    container = facts()["config_container"]
    if section not in container:
        raise NemotronError(f"overrides: {section!r} is not a ConfigContainer field; known: {', '.join(container)}")
    chosen = facts()["recipes"][recipe]["sections"].get(section) or (known or {}).get(section)
    candidates = container[section]["classes"]
    if chosen is None and len(candidates) != 1:
        raise NemotronError(f"overrides: section {section!r} of {recipe} has no single dataclass ({candidates})")
    return chosen or candidates[0]


def check_overrides(overrides: dict[str, Any], recipe: str, known: dict[str, str] | None = None) -> None:
    """Every key must exist on the dataclass it targets (per the facts), in nested dataclasses too, and
    a value of a `Literal` field must be one it allows.
    `known`: section -> facts class, for sections the recipe's facts do not name (see `section_class`)."""

    def walk(values: dict[str, Any], key: str, where: str) -> None:
        fields, complete = class_fields(key)
        allowed = set(fields) | (set() if complete else set(facts()["classes"][key].get("used_keys", [])))
        for name, value in values.items():
            if name not in allowed:
                raise NemotronError(f"overrides: {where}.{name} is not a field of {key} "
                                    f"(Megatron-Bridge {facts()['megatron_bridge_commit'][:12]})")
            choices = literal_values(fields.get(name, ""))
            if choices is not None and value not in choices:
                raise NemotronError(f"overrides: {where}.{name} = {value!r} is not one of {choices}, the values "
                                    f"{key} allows (Megatron-Bridge {facts()['megatron_bridge_commit'][:12]})")
            nested = [k for k in facts()["classes"]
                      if any(k.endswith(f":{n}") for n in _names(fields.get(name, "")))]
            if isinstance(value, dict) and nested and facts()["classes"][nested[0]].get("dataclass"):
                walk(value, nested[0], f"{where}.{name}")

    for section, values in overrides.items():
        target = section_class(recipe, section, known)
        if isinstance(values, dict):
            walk(values, target, section)


def literal_values(annotation: str) -> list[Any] | None:
    """The values a `Literal[...]` annotation allows (None too under `Optional` or `| None`); None when
    the annotation also admits other types, e.g. `Literal['auto'] | int`, or is not a Literal at all."""
    try:
        tree = ast.parse(annotation, mode="eval").body
    except SyntaxError:
        return None
    values: list[Any] = []

    def collect(node: ast.expr) -> bool:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return collect(node.left) and collect(node.right)
        if isinstance(node, ast.Constant) and node.value is None:
            values.append(None)
            return True
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return False
        inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if node.value.id == "Literal":
            try:
                values.extend(ast.literal_eval(element) for element in inner)
            except ValueError:  # a name, not a constant
                return False
            return True
        if node.value.id == "Optional":
            values.append(None)
        return node.value.id in ("Optional", "Union") and all(collect(element) for element in inner)

    return values if collect(tree) else None


def _names(annotation: str) -> list[str]:
    return [word for word in annotation.replace("|", " ").replace("[", " ").replace("]", " ").replace(",", " ").split()
            if word[:1].isupper() and word not in {"Optional", "Literal", "None", "Union", "Any", "Path"}]
