"""Post-training records: one reader per dataset family, mapping its fields to one normalized schema.

NVIDIA's post-training sets share OpenAI-style `messages` (role, content, `reasoning_content`,
`tool_calls`, tool `tool_call_id`) but each family keeps its own signals beside them. A reader
turns one raw record into one normalized record, or raises `Rejected(reason, detail)`:

family: real set (shape) -> correctness signal (`meta_correctness_source`)
- math: Nemotron-Math-v2 (`problem`, `expected_answer`, `metadata` pass rates)
  -> boxed answer == `expected_answer` (`answer_match`)
- proofs: Nemotron-Math-Proofs-v1 (`messages: []` when unproved) -> a proof is present = Lean-verified
  (`lean_verified`)
- science: Nemotron-Science-v1 (MCQ / RQA) -> the answer is boxed, a letter for MCQ (`boxed_answer_format`)
- agentic: Nemotron-Agentic-v1 (`tools`, tool calls) -> rows were kept by an LLM judge (`judge_filtered`)
- chat: Instruction-Following-Chat-v1; legacy Post-Training v1/v2 (`<think>` in content, `metadata` JSON
  string) -> IFEval/IFBench verifiers filtered the rows (`verifier_filtered`); legacy: `expected_answer` match
- harmony: records that already hold a Harmony `text` -> an optional `meta_correctness` field

Mapping to Harmony (the `text`): a Harmony system message (reasoning effort: the Math-v2 split name
high/medium/low, `reasoning: "off"` -> low, otherwise medium); the record's system prompt and its
`tools` become the developer message; `reasoning_content` -> an `analysis` message; assistant
`content` -> `final`, or a `commentary` preamble when the turn also calls tools; each tool call ->
`commentary` to `functions.<name>` with `<|constrain|>json` and the arguments (a JSON string as
given, a dict serialized); a tool result -> a message from `functions.<name>` to the assistant.

Binning rule for `meta_difficulty_bin` (written down, as the issue asks):
- math with pass rates: p = mean `accuracy` over the `reason_*` regimes present; p >= 0.7 low,
  p >= 0.3 medium, else high (`meta_difficulty_source: pass_rate`);
- everything else: the completion's length as a proxy, < 300 characters low, < 1,000 medium, else
  high (`completion_chars`).

`loss_mode`: `final_only` for proof dialogues with several attempts (the earlier attempts failed to
compile and must not be learned), `assistant_all` otherwise.

Rejections (the reasons the normalize step counts): `unknown role`, `tool arguments not JSON`,
`no assistant turn`, `does not end with an assistant turn`, `empty prompt turn`,
`tool result without a call`, `invalid harmony`, `not a JSON object`; `empty completion` is a quality
flag that the step filters on.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nemotron.data_prep.chat.harmony import (
    JSON_CONTENT_TYPE,
    HarmonyError,
    HarmonyMessage,
    developer_content,
    parse,
    render,
    system_content,
)

FAMILIES = ("math", "proofs", "science", "agentic", "chat", "harmony")
SOURCE_ROLES = ("system", "developer", "user", "assistant", "tool")
EASY_PASS_RATE, HARD_PASS_RATE = 0.7, 0.3
SHORT_COMPLETION, LONG_COMPLETION = 300, 1000
THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


class Rejected(Exception):
    """A raw record that cannot become a training record: `reason` is the count key."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


# ---------------------------------------------------------------------------------------------
# OpenAI-style messages -> Harmony messages
# ---------------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _arguments(call: dict, where: str) -> tuple[str, str]:
    function = call.get("function") or {}
    name, arguments = function.get("name"), function.get("arguments")
    if not isinstance(name, str) or not name:
        raise Rejected("tool call without a name", where)
    if isinstance(arguments, dict):
        return name, json.dumps(arguments, ensure_ascii=False)
    try:
        json.loads(arguments)
    except (TypeError, ValueError):
        raise Rejected("tool arguments not JSON", f"{where}, call to {name}: {str(arguments)[:60]!r}") from None
    return name, arguments


def to_harmony(messages: list, tools: list, reasoning_effort: str) -> list[HarmonyMessage]:
    """Convert OpenAI-style messages (with reasoning and tool calls) to Harmony messages."""
    if not isinstance(messages, list) or not messages:
        raise Rejected("no assistant turn", "messages is empty")
    instructions, body, calls_by_id, pending = [], [], {}, []
    for index, message in enumerate(messages):
        where = f"message {index}"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in SOURCE_ROLES:
            raise Rejected("unknown role", f"{where} has role {role!r}")
        content = _text(message.get("content"))
        if role in ("system", "developer"):
            if content.strip():
                instructions.append(content)
        elif role == "user":
            if not content.strip():
                raise Rejected("empty prompt turn", f"{where} (user) has no text")
            body.append(HarmonyMessage("user", content))
        elif role == "assistant":
            reasoning, tool_calls = _text(message.get("reasoning_content")), message.get("tool_calls") or []
            if (think := THINK.match(content)) is not None:  # legacy sets keep reasoning inside content
                reasoning, content = think.group(1).strip(), content[think.end():]
            if reasoning.strip():
                body.append(HarmonyMessage("assistant", reasoning, channel="analysis"))
            if tool_calls:
                if content.strip():  # a preamble the user sees before the calls
                    body.append(HarmonyMessage("assistant", content, channel="commentary"))
                for call in tool_calls:
                    name, arguments = _arguments(call, where)
                    calls_by_id[call.get("id")] = name
                    pending.append(name)
                    body.append(HarmonyMessage("assistant", arguments, channel="commentary",
                                               recipient=f"functions.{name}", content_type=JSON_CONTENT_TYPE))
            else:
                body.append(HarmonyMessage("assistant", content, channel="final"))
        else:  # tool: answer the call named by tool_call_id, else the oldest unanswered call
            name = calls_by_id.get(message.get("tool_call_id")) or (pending[0] if pending else None)
            if name is None:
                raise Rejected("tool result without a call", where)
            if name in pending:
                pending.remove(name)
            body.append(HarmonyMessage("tool", content, name=f"functions.{name}", channel="commentary",
                                       recipient="assistant"))
    if not any(m.role == "assistant" for m in body):
        raise Rejected("no assistant turn", f"{len(messages)} message(s), none from the assistant")
    if body[-1].role != "assistant":
        raise Rejected("does not end with an assistant turn", f"last message is from {body[-1].role}")
    declared = [spec for spec in tools or [] if isinstance(spec, dict)]
    header = [HarmonyMessage("system", system_content(reasoning_effort, has_function_tools=bool(declared)))]
    if instructions or declared:
        header.append(HarmonyMessage("developer", developer_content("\n\n".join(instructions) or None, declared)))
    return header + body


# ---------------------------------------------------------------------------------------------
# Signals per family
# ---------------------------------------------------------------------------------------------


def boxed_answer(text: str) -> str | None:
    """The content of the last \\boxed{...}, braces balanced, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, position = 0, start + len("\\boxed{")
    for end in range(position, len(text)):
        depth += {"{": 1, "}": -1}.get(text[end], 0)
        if depth < 0:
            return text[position:end].strip()
    return None


def _same_answer(a: str, b: str) -> bool:
    canonical = lambda s: re.sub(r"\s+|\$", "", s).rstrip(".")  # noqa: E731
    return canonical(a) == canonical(b)


def _pass_rate(metadata: Any) -> float | None:
    if not isinstance(metadata, dict):
        return None
    rates = [v["accuracy"] for k, v in sorted(metadata.items())
             if k.startswith("reason_") and isinstance(v, dict) and isinstance(v.get("accuracy"), (int, float))]
    return sum(rates) / len(rates) if rates else None


def _reasoning_effort(family: str, raw: dict, split: str) -> str:
    if family == "math":
        return next((effort for effort in ("high", "medium", "low") if split.startswith(effort)), "medium")
    return "low" if raw.get("reasoning") == "off" else "medium"


def _legacy_metadata(raw: dict) -> dict:
    try:
        metadata = json.loads(raw["metadata"]) if isinstance(raw.get("metadata"), str) else {}
    except ValueError:
        return {}
    return metadata if isinstance(metadata, dict) else {}


def _signals(family: str, raw: dict, split: str, final: str) -> tuple[float | None, str, str]:
    """(meta_correctness, its source, meta_domain)."""
    answer = boxed_answer(final)
    if family == "math":
        expected = raw.get("expected_answer")
        if isinstance(expected, str) and expected.strip():
            return float(answer is not None and _same_answer(answer, expected)), "answer_match", "math"
        return _pass_rate(raw.get("metadata")), "pass_rate", "math"
    if family == "proofs":
        return 1.0, "lean_verified", "math_proofs"
    if family == "science":
        well_formed = answer is not None and (split != "MCQ" or re.fullmatch(r"[A-J]", answer) is not None)
        return float(well_formed), "boxed_answer_format", "science"
    if family == "agentic":
        return 1.0, "judge_filtered", "tool_use"
    if family == "chat":
        expected = _legacy_metadata(raw).get("expected_answer")
        domain = raw.get("capability_target") or raw.get("category") or split
        if isinstance(expected, str):
            return float(answer is not None and _same_answer(answer, expected)), "answer_match", str(domain)
        return (1.0, "verifier_filtered", str(domain)) if "capability_target" in raw else (None, "none", str(domain))
    correctness = raw.get("meta_correctness")
    value = float(correctness) if isinstance(correctness, (int, float)) else None
    return value, "given", str(raw.get("meta_domain", "unknown"))


def _tools(raw: dict) -> list:
    tools = raw.get("tools")
    if isinstance(tools, list):
        return tools
    return _legacy_metadata(raw).get("tools") or []


# ---------------------------------------------------------------------------------------------
# One raw record -> one normalized record
# ---------------------------------------------------------------------------------------------


def completion_index(messages: list[HarmonyMessage]) -> int:
    """Index of the first message of the completion: the first assistant message after the last user turn."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    return next(i for i in range(last_user + 1, len(messages)) if messages[i].role == "assistant")


def normalize_record(family: str, raw: Any, dataset: str, split: str, fallback_id: str) -> dict[str, Any]:
    """The normalized record (see `schema.SCHEMA`) for one raw record, or `Rejected`."""
    if not isinstance(raw, dict):
        raise Rejected("not a JSON object", type(raw).__name__)
    if family == "harmony":
        try:
            messages = parse(raw.get("text") or "")
        except HarmonyError as error:
            raise Rejected("invalid harmony", str(error)) from None
        if not any(m.role == "assistant" for m in messages):
            raise Rejected("no assistant turn", "the Harmony text has no assistant message")
        if messages[-1].role != "assistant":
            raise Rejected("does not end with an assistant turn", f"last message is from {messages[-1].role}")
        tools_declared = []
    else:
        tools_declared = _tools(raw)
        messages = to_harmony(raw.get("messages"), tools_declared, _reasoning_effort(family, raw, split))
    text = render(messages, training=True)
    try:
        valid = parse(text) == messages  # e.g. a content holding "<|end|>" would not read back
    except HarmonyError:
        valid = False
    if not valid:
        raise Rejected("invalid harmony", "the rendered text does not parse back into the same messages")

    start = completion_index(messages)
    completion_start = len(render(messages[:start], training=True)) if start else 0
    finals = [m.content for m in messages if m.role == "assistant" and m.channel == "final"]
    calls = [m.recipient.removeprefix("functions.") for m in messages if m.is_tool_call]
    declared = {(spec.get("function") or spec).get("name") for spec in tools_declared if isinstance(spec, dict)}
    reasoning_chars = sum(len(m.content) for m in messages if m.channel == "analysis")
    correctness, correctness_source, domain = _signals(family, raw, split, finals[-1] if finals else "")
    pass_rate = _pass_rate(raw.get("metadata")) if family == "math" else None
    if pass_rate is not None:
        difficulty = "low" if pass_rate >= EASY_PASS_RATE else "medium" if pass_rate >= HARD_PASS_RATE else "high"
        difficulty_source = "pass_rate"
    else:
        size = len(text) - completion_start
        difficulty = "low" if size < SHORT_COMPLETION else "medium" if size < LONG_COMPLETION else "high"
        difficulty_source = "completion_chars"
    assistant_turns = sum(1 for i, m in enumerate(messages) if m.role == "assistant" and
                          (i == 0 or messages[i - 1].role != "assistant"))
    return {
        "id": hashlib.sha1(text.encode("utf-8")).hexdigest(),
        "text": text,
        "messages": [m.to_dict() for m in messages],
        "dataset": dataset,
        "split": split,
        "source_id": str(raw.get("uuid") or raw.get("id") or fallback_id),
        "completion_start": completion_start,
        "meta_correctness": correctness,
        "meta_correctness_source": correctness_source,
        "meta_difficulty_bin": difficulty,
        "meta_difficulty_source": difficulty_source,
        "meta_pass_rate": pass_rate,
        "meta_domain": domain,
        "meta_tool_use": {"names": sorted(set(calls)), "calls": len(calls)},
        "meta_reasoning": {"present": reasoning_chars > 0, "chars": reasoning_chars},
        "meta_num_turns": sum(1 for m in messages if m.role == "user"),
        "quality_valid_harmony": True,
        "quality_completion_nonempty": bool(messages[-1].content.strip()),
        "quality_tool_args_json": True,
        "quality_tools_declared": set(calls) <= declared,
        "quality_has_final_answer": messages[-1].channel == "final",
        "loss_mode": "final_only" if family == "proofs" and assistant_turns > 1 else "assistant_all",
    }
