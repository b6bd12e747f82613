"""Extract the Megatron-Bridge facts our hand-off is checked against, into a small JSON file we ship.

`nemotron.training.megatron_bridge` writes override files for Megatron-Bridge recipe functions and
packed Parquet / bin/idx data for its readers. Megatron-Bridge cannot be installed on a CPU machine,
so the tests check our output against facts read from its source instead: this script parses the
reference files with `ast` (nothing is imported or executed) and writes
`src/nemotron/training/megatron_bridge/megatron_bridge_facts.json`:

- `config_container`: every field of `ConfigContainer` and the class(es) its annotation names;
- `classes`: every dataclass reachable from those fields (and from their dataclass-typed fields),
  with all fields and their annotations, following base classes into the Megatron-LM reference
  (`megatron.training.config`) and into the installed megatron-core (`megatron.core`, its version is
  recorded). A class whose source, or one of whose bases' sources, was not available is marked
  `"complete": false`; `used_keys` lists the keys the reference recipes themselves set on it;
- `recipes`: the recipe functions (module, parameters, which `_*_common` template they start from and
  the class of each section the template fills);
- `packed_parquet`: the packed-Parquet reader's required columns, their documented Arrow types, the
  writer's loss-mask type, the accepted file suffixes and the slicing its collate applies per packed
  sequence (which is where the loss-mask shift convention lives);
- `gpt_dataset_blend`: the annotations and documentation of `blend`, `blend_per_split` and `split`;
- `model_arguments`: for each recipe function that builds its model inline (`cfg.model = Provider(...)`),
  the keyword arguments written as literals (shape, MoE routing, ...); a value that is not a literal
  (e.g. `squared_relu`, `torch.bfloat16`) is kept as its source text. `nemotron.models.nano3` is tested
  against the `nemotron_3_nano` entry.

Sources, in order: the reference folders (`--megatron-bridge`, `--megatron-lm`, each README names its
commit); for Megatron-Bridge modules that the reference folder does not hold (e.g. the
`GPTSFTPackedDataset` collate, `DataloaderConfig`, `PackedSequenceSpecs`), a git clone of
Megatron-Bridge given with `--bridge-git`, read with `git show <reference commit>:<path>` at exactly the
commit the reference names; megatron-core from the installed package. Every class records where it came
from. The output is deterministic (sorted keys, no timestamps, no absolute paths): re-running with the
same inputs gives the same bytes.

Re-run (from the repository root, with the shared reference checked out next to it):

    /work/main/.venv/bin/python scripts/extract_megatron_bridge_facts.py \
        --megatron-bridge ../shared/reference/megatron-bridge --megatron-lm ../shared/reference/megatron-lm \
        --bridge-git /path/to/Megatron-Bridge-clone

Neither the package nor its tests read the reference: they read the JSON this script wrote.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "src" / "nemotron" / "training" / "megatron_bridge" / "megatron_bridge_facts.json"

# The recipe functions whose parameters and templates we record (module, function).
RECIPE_MODULES = [
    "megatron.bridge.recipes.nemotronh.h100.nemotron_nano_v2",
    "megatron.bridge.recipes.nemotronh.h100.nemotron_3_nano",
]
COMMON_MODULE = "megatron.bridge.recipes.common"
CONFIG_MODULE = "megatron.bridge.training.config"
PARQUET_MODULE = "megatron.bridge.data.packing.parquet"
PACKED_DATASET_MODULE = "megatron.bridge.data.packing.gpt_sft"
PATHS_MODULE = "megatron.bridge.data.packing.paths"
BLEND_MODULE = "megatron.core.datasets.blended_megatron_dataset_config"
# Names in annotations that are never config dataclasses we can follow.
NOT_CLASSES = {"Optional", "Union", "Literal", "Any", "Callable", "None", "dict", "list", "tuple", "str", "int",
               "float", "bool", "Dict", "List", "Tuple", "Path", "torch", "Set", "set", "type"}


def reference_commit(folder: Path) -> str:
    """The 40-hex commit a reference folder's README names."""
    match = re.search(r"\b[0-9a-f]{40}\b", (folder / "README.md").read_text())
    if not match:
        sys.exit(f"error: {folder}/README.md names no commit")
    return match.group(0)


@dataclass
class Sources:
    """Finds a module's source text and says where it came from."""

    bridge: Path
    megatron_lm: Path
    bridge_commit: str
    bridge_git: Path | None
    core_root: Path | None
    origins: dict[str, str] = field(default_factory=dict)
    cache: dict[str, tuple[ast.Module, str] | None] = field(default_factory=dict)

    def module(self, name: str) -> tuple[ast.Module, str] | None:
        """(parsed module, origin label), or None when no source holds it."""
        if name not in self.cache:
            self.cache[name] = self._load(name)
        return self.cache[name]

    def _load(self, name: str) -> tuple[ast.Module, str] | None:
        rel = name.replace(".", "/")
        candidates = [f"{rel}.py", f"{rel}/__init__.py"]
        if name.startswith("megatron.bridge"):
            for candidate in candidates:
                path = self.bridge / "src" / candidate
                if path.is_file():
                    return ast.parse(path.read_text()), f"megatron-bridge reference: src/{candidate}"
            if self.bridge_git:
                for candidate in candidates:
                    shown = subprocess.run(
                        ["git", "-C", str(self.bridge_git), "show", f"{self.bridge_commit}:src/{candidate}"],
                        capture_output=True, text=True,
                    )
                    if shown.returncode == 0:
                        where = f"megatron-bridge git {self.bridge_commit[:12]}: src/{candidate}"
                        return ast.parse(shown.stdout), where
            return None
        if name.startswith("megatron.training"):
            for candidate in candidates:
                path = self.megatron_lm / candidate
                if path.is_file():
                    return ast.parse(path.read_text()), f"megatron-lm reference: {candidate}"
            return None
        if name.startswith("megatron.core") and self.core_root:
            for candidate in candidates:
                path = self.core_root / candidate
                if path.is_file():
                    return ast.parse(path.read_text()), f"megatron-core installed: {candidate}"
        return None


def imports_of(tree: ast.Module, module_name: str, is_package: bool) -> dict[str, tuple[str, str]]:
    """Local name -> (module, original name) for every top-level `from X import Y [as Z]`."""
    found = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:  # relative: level 1 is the package itself for an __init__, else the parent
            parts = module_name.split(".")
            keep = len(parts) - node.level + (1 if is_package else 0)
            base = ".".join(parts[:keep] + ([base] if base else []))
        for alias in node.names:
            found[alias.asname or alias.name] = (base, alias.name)
    return found


def resolve_class(sources: Sources, module_name: str, name: str, depth: int = 0):
    """(ClassDef, module name, origin) for `name` as seen from `module_name`, following imports."""
    loaded = sources.module(module_name)
    if loaded is None or depth > 8:
        return None
    tree, origin = loaded
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, module_name, origin
    imported = imports_of(tree, module_name, "__init__.py" in origin).get(name)
    if imported:
        target_module, target_name = imported
        direct = resolve_class(sources, target_module, target_name, depth + 1)
        if direct:
            return direct
    return None


def annotation_names(annotation: ast.expr | None) -> list[str]:
    """Class-like names an annotation mentions (`A | B`, `Optional[A]`, `Union[A, B]`), in order."""
    if annotation is None:
        return []
    names = []
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name) and node.id not in NOT_CLASSES and node.id[:1].isupper():
            names.append(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value[:1].isupper():
            names.append(node.value)  # forward references as strings
    return list(dict.fromkeys(names))


def is_dataclass(node: ast.ClassDef) -> bool:
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if (isinstance(target, ast.Name) and target.id == "dataclass") or (
            isinstance(target, ast.Attribute) and target.attr == "dataclass"
        ):
            return True
    return False


def own_fields(node: ast.ClassDef) -> tuple[dict[str, str], list[str]]:
    """Annotated class-level names as {name: annotation source}, and the names declared `init=False`."""
    fields, not_init = {}, []
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            annotation = ast.unparse(statement.annotation)
            if annotation.startswith(("ClassVar", "typing.ClassVar")):
                continue
            fields[statement.target.id] = annotation
            value = statement.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "field":
                if any(k.arg == "init" and isinstance(k.value, ast.Constant) and k.value.value is False
                       for k in value.keywords):
                    not_init.append(statement.target.id)
    return fields, not_init


class ClassTable:
    """Every class we record, keyed `module:Name` (Bridge subclasses Megatron classes of the same name)."""

    def __init__(self, sources: Sources) -> None:
        self.sources = sources
        self.classes: dict[str, dict] = {}

    def add(self, module_name: str, name: str) -> str:
        """Record class `name` as seen from `module_name` (with its bases and dataclass-typed fields)."""
        resolved = resolve_class(self.sources, module_name, name)
        if resolved is None:
            key = f"{module_name}:{name}"
            self.classes.setdefault(key, {"source": None, "complete": False, "bases": [], "fields": {}})
            if not self.classes[key].get("complete") and self.classes[key]["source"] is None:
                self.classes[key]["complete"] = False
            return key
        node, where, origin = resolved
        key = f"{where}:{node.name}"
        if key in self.classes:
            return key
        entry = {"source": origin, "dataclass": is_dataclass(node), "bases": [], "complete": True}
        self.classes[key] = entry
        for base in node.bases:
            base_name = ast.unparse(base).split("[")[0].split(".")[-1]
            if base_name in {"object", "Generic", "ABC", "Protocol"}:
                continue
            base_key = self.add(where, base_name)
            entry["bases"].append(base_key)
            entry["complete"] = entry["complete"] and self.classes[base_key]["complete"]
        fields, not_init = own_fields(node)
        entry["fields"] = dict(sorted(fields.items()))
        if not_init:
            entry["init_false"] = sorted(not_init)
        for annotation in fields.values():
            for class_name in annotation_names(ast.parse(annotation, mode="eval").body):
                nested = resolve_class(self.sources, where, class_name)
                if nested and is_dataclass(nested[0]):
                    self.add(where, class_name)
        return key


# ---------------------------------------------------------------------------------------------------
# Recipes
# ---------------------------------------------------------------------------------------------------


def function_params(node: ast.FunctionDef) -> list[dict]:
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = []
    for arg, default in [*zip(positional, defaults), *zip(args.kwonlyargs, args.kw_defaults)]:
        params.append({
            "name": arg.arg,
            "type": ast.unparse(arg.annotation) if arg.annotation else None,
            "default": ast.unparse(default) if default is not None else None,
        })
    return params


def template_sections(tree: ast.Module) -> dict[str, dict[str, str]]:
    """For each `_*_common()` in recipes/common.py: the class of each ConfigContainer keyword it sets."""
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    templates = {}
    for name, node in functions.items():
        if not name.startswith("_") or not name.endswith("_common"):
            continue
        sections = {}
        for call in ast.walk(node):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "ConfigContainer":
                for keyword in call.keywords:
                    if isinstance(keyword.value, ast.Call):
                        sections[keyword.arg] = ast.unparse(keyword.value.func)
        # `cfg = _sft_common()` templates that derive from another template.
        for call in ast.walk(node):
            if isinstance(call, ast.Assign) and isinstance(call.value, ast.Call) \
                    and getattr(call.value.func, "id", "").endswith("_common"):
                sections = {**templates.get(call.value.func.id, {}), **sections}
        templates[name] = sections
    return templates


def dataset_factory_classes(tree: ast.Module) -> dict[str, str]:
    """Return-annotation class of every function in recipes/utils/dataset_utils.py (e.g. default_squad_config)."""
    return {node.name: ast.unparse(node.returns) for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.returns is not None}


def recipe_facts(sources: Sources, table: ClassTable) -> dict:
    common_tree, _ = sources.module(COMMON_MODULE)
    templates = template_sections(common_tree)
    dataset_utils = sources.module("megatron.bridge.recipes.utils.dataset_utils")
    factories = dataset_factory_classes(dataset_utils[0]) if dataset_utils else {}
    recipes = {}
    for module_name in RECIPE_MODULES:
        tree, origin = sources.module(module_name)
        public = None
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                public = ast.literal_eval(node.value)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or (public is not None and node.name not in public):
                continue
            template, model_class = None, None
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call) and getattr(inner.func, "id", "") in templates:
                    template = inner.func.id
                if isinstance(inner, ast.Assign) and any(ast.unparse(t) == "cfg.model" for t in inner.targets) \
                        and isinstance(inner.value, ast.Call) and ast.unparse(inner.value.func)[:1].isupper():
                    model_class = ast.unparse(inner.value.func)
            sections = {}
            for section, callee in templates.get(template, {}).items():
                if callee in factories:  # default_squad_config() -> its return annotation's class
                    sections[section] = table.add("megatron.bridge.recipes.utils.dataset_utils", factories[callee])
                elif callee[:1].isupper():
                    sections[section] = table.add(COMMON_MODULE, callee)
            if model_class:
                sections["model"] = table.add(module_name, model_class)
            recipes[node.name] = {
                "module": module_name,
                "source": origin,
                "params": function_params(node),
                "returns": ast.unparse(node.returns) if node.returns else None,
                "template": template,
                "sections": dict(sorted(sections.items())),
            }
    return dict(sorted(recipes.items()))


def model_arguments(sources: Sources) -> dict[str, dict]:
    """Keyword arguments of every inline `cfg.model = SomeProvider(...)` in the recipe modules."""
    found = {}
    for module_name in RECIPE_MODULES:
        tree, origin = sources.module(module_name)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign) and any(ast.unparse(t) == "cfg.model" for t in inner.targets) \
                        and isinstance(inner.value, ast.Call) and ast.unparse(inner.value.func)[:1].isupper():
                    arguments = {}
                    for keyword in inner.value.keywords:
                        try:
                            arguments[keyword.arg] = ast.literal_eval(keyword.value)
                        except ValueError:
                            arguments[keyword.arg] = {"source": ast.unparse(keyword.value)}
                    found[node.name] = {"source": origin, "provider": ast.unparse(inner.value.func),
                                        "arguments": dict(sorted(arguments.items()))}
    return dict(sorted(found.items()))


def used_keys(sources: Sources) -> dict[str, list[str]]:
    """Keys the reference recipes set, per class: `Class(key=...)` and `cfg.<section>.<key> = ...`."""
    section_class = {"model": "HybridModelProvider", "tokenizer": "TokenizerConfig", "train": "TrainingConfig",
                     "validation": "ValidationConfig", "optimizer": "OptimizerConfig",
                     "scheduler": "SchedulerConfig", "checkpoint": "CheckpointConfig", "ddp":
                     "DistributedDataParallelConfig", "logger": "LoggerConfig", "rng": "RNGConfig"}
    keys: dict[str, set[str]] = {}
    for module_name in [COMMON_MODULE, *RECIPE_MODULES]:
        tree, _ = sources.module(module_name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper():
                keys.setdefault(node.func.id, set()).update(k.arg for k in node.keywords if k.arg)
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    text = ast.unparse(target)
                    match = re.fullmatch(r"cfg\.(\w+)\.(\w+)", text)
                    if match and match.group(1) in section_class:
                        keys.setdefault(section_class[match.group(1)], set()).add(match.group(2))
    return {name: sorted(values) for name, values in sorted(keys.items())}


# ---------------------------------------------------------------------------------------------------
# Packed Parquet and the blend
# ---------------------------------------------------------------------------------------------------


def slice_offsets(node: ast.Slice, start: str, end: str) -> list[int] | None:
    """A slice `b[i] + k : b[i+1] - m` as [k, -m] relative to the packed sequence's (start, end)."""

    def offset(bound: ast.expr | None, anchor: str) -> int | None:
        if bound is None:
            return None
        # `item["seq_boundaries"][i]` and a local `seq_boundaries[i]` are the same anchor
        text = re.sub(r"\w+\[['\"]seq_boundaries['\"]\]", "seq_boundaries", ast.unparse(bound).replace(" ", ""))
        if text == anchor:
            return 0
        for sign in "+-":
            if text.startswith(anchor + sign) and text[len(anchor) + 1:].isdigit():
                return int(text[len(anchor) + 1:]) * (1 if sign == "+" else -1)
        return None

    low, high = offset(node.lower, start), offset(node.upper, end)
    return None if low is None or high is None else [low, high]


def packed_parquet_facts(sources: Sources) -> dict:
    tree, origin = sources.module(PARQUET_MODULE)
    facts: dict = {"source": origin}
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "REQUIRED_COLUMNS":
            facts["required_columns"] = sorted(ast.literal_eval(node.value))
        if isinstance(node, ast.ClassDef) and node.name == "GPTSFTPackedParquetDataset":
            doc = ast.get_docstring(node) or ""
            facts["reader_class"] = node.name
            facts["documented_types"] = dict(sorted(re.findall(r"-\s+(\w+):\s+(list<\w+>)", doc)))
            facts["documented_suffixes"] = sorted(set(re.findall(r"\*(\.idx\.\w+)", doc)))
            facts["reader_bases"] = [ast.unparse(base) for base in node.bases]
            for inner in ast.walk(node):
                if isinstance(inner, ast.Assign) and getattr(inner.targets[0], "id", "") == "seq_boundaries":
                    facts["seq_boundaries"] = ast.unparse(inner.value)
        if isinstance(node, ast.FunctionDef) and node.name == "write_packed_parquet":
            for inner in ast.walk(node):
                if isinstance(inner, ast.Dict):
                    for key, value in zip(inner.keys, inner.values):
                        if isinstance(key, ast.Constant) and key.value == "loss_mask":
                            types = [c.func.attr for c in ast.walk(value) if isinstance(c, ast.Call)
                                     and isinstance(c.func, ast.Attribute) and c.func.attr.startswith(("int", "uint"))]
                            facts["writer_loss_mask_type"] = types[0] if types else None
    paths = sources.module(PATHS_MODULE)
    if paths:
        paths_tree, paths_origin = paths
        for node in paths_tree.body:
            if isinstance(node, ast.FunctionDef) and node.name == "is_packed_parquet_spec":
                suffixes = {c.args[0].value for c in ast.walk(node) if isinstance(c, ast.Call)
                            and getattr(c.func, "attr", "") == "endswith" and c.args
                            and isinstance(c.args[0], ast.Constant)}
                facts["accepted_suffixes"] = sorted(suffixes)
                facts["accepted_suffixes_source"] = paths_origin
    packed = sources.module(PACKED_DATASET_MODULE)
    if packed:
        packed_tree, packed_origin = packed
        collate: dict = {"source": packed_origin}
        for node in ast.walk(packed_tree):
            if isinstance(node, ast.FunctionDef) and node.name in {"collate_fn", "_build_loss_mask"}:
                for inner in ast.walk(node):
                    if not (isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Slice)):
                        continue
                    column = ast.unparse(inner.value)
                    column_match = re.search(r"\[['\"](input_ids|loss_mask)['\"]\]$", column)
                    if not column_match:
                        continue
                    offsets = slice_offsets(inner.slice, "seq_boundaries[i]", "seq_boundaries[i+1]")
                    if offsets is None:
                        continue
                    name = column_match.group(1)
                    role = {"input_ids": "tokens" if offsets[0] == 0 else "labels", "loss_mask": "loss_mask"}[name]
                    if node.name == "_build_loss_mask" and name == "input_ids":
                        continue  # the eos-based mask of answer_only_loss=False; not the stored mask
                    collate[role] = {"column": name, "offsets": offsets}
        collate["meaning"] = ("per packed sequence [start, end): slice column[start + offsets[0] : end + offsets[1]]"
                              " (seq_boundaries = seq_start_id + [len(input_ids)])")
        facts["collate"] = dict(sorted(collate.items()))
    return dict(sorted(facts.items()))


def blend_facts(sources: Sources) -> dict:
    tree, origin = sources.module(BLEND_MODULE)
    facts: dict = {"source": origin}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "BlendedMegatronDatasetConfig":
            body = node.body
            for index, statement in enumerate(body):
                if isinstance(statement, ast.AnnAssign) and getattr(statement.target, "id", "") in {
                        "blend", "blend_per_split", "split"}:
                    doc = None
                    if index + 1 < len(body) and isinstance(body[index + 1], ast.Expr) \
                            and isinstance(body[index + 1].value, ast.Constant):
                        doc = " ".join(str(body[index + 1].value.value).split())
                    facts[statement.target.id] = {"type": ast.unparse(statement.annotation), "doc": doc}
    return dict(sorted(facts.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megatron-bridge", type=Path, default=REPO.parent / "shared/reference/megatron-bridge")
    parser.add_argument("--megatron-lm", type=Path, default=REPO.parent / "shared/reference/megatron-lm")
    parser.add_argument("--bridge-git", type=Path, default=None,
                        help="a Megatron-Bridge git clone holding the reference commit "
                             "(for modules the reference lacks)")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()

    bridge_commit = reference_commit(args.megatron_bridge)
    lm_commit = reference_commit(args.megatron_lm)
    if args.bridge_git is not None:
        check = subprocess.run(["git", "-C", str(args.bridge_git), "cat-file", "-t", bridge_commit],
                               capture_output=True, text=True)
        if check.stdout.strip() != "commit":
            sys.exit(f"error: {args.bridge_git} does not hold commit {bridge_commit}; fetch it or omit --bridge-git")
    spec = importlib.util.find_spec("megatron.core")
    core_root = Path(spec.origin).parents[2] if spec and spec.origin else None
    core_version = importlib.metadata.version("megatron-core") if core_root else None
    sources = Sources(args.megatron_bridge, args.megatron_lm, bridge_commit, args.bridge_git, core_root)

    config_tree, _ = sources.module(CONFIG_MODULE)
    table = ClassTable(sources)
    container = resolve_class(sources, CONFIG_MODULE, "ConfigContainer")[0]
    container_fields = {}
    for name, annotation in own_fields(container)[0].items():
        if name.startswith("_"):
            continue
        classes = [table.add(CONFIG_MODULE, class_name)
                   for class_name in annotation_names(ast.parse(annotation, mode="eval").body)]
        container_fields[name] = {"type": annotation, "classes": classes}
    table.add("megatron.bridge.data.builders.gpt_sft", "PackedSequenceSpecs")
    recipes = recipe_facts(sources, table)
    for name, keys in used_keys(sources).items():  # attach to the Bridge class of that name
        for key, entry in table.classes.items():
            if key.startswith("megatron.bridge") and key.endswith(f":{name}"):
                entry["used_keys"] = keys

    facts = {
        "about": "Facts about Megatron-Bridge extracted with ast by scripts/extract_megatron_bridge_facts.py; "
                 "see its docstring to re-run. Do not edit by hand.",
        "megatron_bridge_commit": bridge_commit,
        "megatron_lm_commit": lm_commit,
        "megatron_core_version": core_version,
        "config_container": dict(sorted(container_fields.items())),
        "classes": dict(sorted(table.classes.items())),
        "recipes": recipes,
        "packed_parquet": packed_parquet_facts(sources),
        "gpt_dataset_blend": blend_facts(sources),
        "model_arguments": model_arguments(sources),
    }
    text = json.dumps(facts, indent=1, sort_keys=True) + "\n"
    args.output.write_text(text)
    print(f"wrote {args.output} ({len(text)} bytes, {len(table.classes)} classes, "
          f"{len(facts['recipes'])} recipes)", file=sys.stderr)


if __name__ == "__main__":
    main()
