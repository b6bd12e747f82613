"""nemotron.sdg without a server: strategies, templates, seed data, the bill, the client's refusals.

Everything here fails in one line before any request is sent, or is plain arithmetic; the tests that
need the local server are in test_sdg_server.py.
"""

from __future__ import annotations

import json
import os
import socket

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from nemotron.errors import NemotronError
from nemotron.recipes.nano2.stage0_pretrain import synthetic_data
from nemotron.sdg import cost
from nemotron.sdg.client import Client, Endpoint, EndpointDown, cap_strings, read_records
from nemotron.sdg.seed import load_seed, seed_stats
from nemotron.sdg.strategies import (
    BUILTIN,
    DiverseQA,
    QAPair,
    Strategy,
    check_columns,
    format_output,
    load_template_dir,
    render,
    select,
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dead_endpoint(**kw) -> Endpoint:
    """An endpoint on a port nothing listens on (bound then released)."""
    return Endpoint(url=f"http://127.0.0.1:{free_port()}/v1", max_retries=1, retry_backoff=0.01, timeout=5, **kw)


# ------------------------------------------------------------------ strategies and templates

def test_five_strategies_render_over_seed_columns():
    assert set(BUILTIN) == {"wikipedia_rephrase", "diverse_qa", "distill", "extract_knowledge", "knowledge_list"}
    record = {"id": "a", "text": "Hamlet speaks to the ghost of his father." * 10, "title": "Hamlet, act 1 scene 5"}
    messages = render(BUILTIN["wikipedia_rephrase"], record, max_chars=41)
    assert messages[0]["role"] == "system" and "Hamlet, act 1 scene 5" in messages[1]["content"]
    assert "Hamlet speaks to the ghost of his father." in messages[1]["content"]
    assert "father.Hamlet" not in messages[1]["content"]  # the seed text was cut to 41 characters
    assert BUILTIN["diverse_qa"].schema is DiverseQA and BUILTIN["distill"].schema is None


def test_unknown_strategy_is_one_line_naming_the_known_ones():
    with pytest.raises(NemotronError, match=r"unknown strategy 'rewrite'; choose from \['distill', 'diverse_qa'"):
        select(["rewrite"])
    with pytest.raises(NemotronError, match="names one twice"):
        select(["distill", "distill"])


def test_a_template_naming_a_missing_column_is_refused(tmp_path):
    (tmp_path / "summary.jinja").write_text("Summarize {{ text }} for {{ audience }}.")
    strategies = select(["distill", "summary"], load_template_dir(tmp_path))
    with pytest.raises(NemotronError, match=r"strategy summary: its template uses column 'audience'"):
        check_columns(strategies, [{"id": "x", "text": "t", "title": ""}], "seed.jsonl")
    check_columns(strategies, [{"id": "x", "text": "t", "audience": "kids"}], "seed.jsonl")  # present: fine


def test_step_refuses_unknown_strategy_and_missing_column_before_any_request(tmp_path):
    # The endpoint is down: if any request were sent, the error would be about the URL instead.
    config = synthetic_data.Config(strategies=("nope",), num_documents=2, endpoint=dead_endpoint(),
                                   output_dir=tmp_path / "out")
    with pytest.raises(NemotronError, match="unknown strategy 'nope'"):
        synthetic_data.main(config)
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "part0.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"doc {i} " * 20}) + "\n"
                                               for i in range(30)))
    config.strategies, config.seed_source = ("wikipedia_rephrase",), str(seeds)  # its template uses {{ title }}
    with pytest.raises(NemotronError, match="uses column 'title', which seed record"):
        synthetic_data.main(config)
    assert not (tmp_path / "out").exists()


def test_qa_pairs_validate_and_format_into_training_text():
    from pydantic import TypeAdapter

    with pytest.raises(ValueError, match="choices"):  # multiple choice without choices
        TypeAdapter(QAPair).validate_python({"question": "Who?", "answer": "Hamlet",
                                             "question_type": "multiple_choice"})
    with pytest.raises(ValueError, match="at least 3"):
        DiverseQA.model_validate({"pairs": [{"question": "Q", "answer": "A", "question_type": "open_ended"}] * 2})
    schema = DiverseQA.model_json_schema()  # the rule is in the schema, so the grammar enforces it
    assert schema["$defs"]["MultipleChoiceQA"]["required"] == ["question", "answer", "question_type", "choices"]
    qa = {"pairs": [{"question": "Is Hamlet a prince?", "answer": "Yes.", "question_type": "yes_no"},
                    {"question": "Who is the ghost?", "answer": "B", "question_type": "multiple_choice",
                     "choices": ["Claudius", "Hamlet's father"]},
                    {"question": "Why does Hamlet wait?", "answer": "He doubts.", "question_type": "open_ended"}]}
    text = format_output(BUILTIN["diverse_qa"], json.dumps(qa), DiverseQA.model_validate(qa).model_dump())
    assert text.startswith("Question: Is Hamlet a prince?\nAnswer: Yes.\n\nQuestion: Who is the ghost?\nA) Claudius\n")
    assert text.count("Question:") == 3
    assert format_output(BUILTIN["distill"], "  short.  \n", None) == "short."


def test_cap_strings_bounds_every_string_of_a_schema():
    capped = cap_strings(DiverseQA.model_json_schema(), 40, max_items=2)
    pair = capped["$defs"]["MultipleChoiceQA"]["properties"]
    assert pair["question"]["maxLength"] == 40 and pair["answer"]["maxLength"] == 40
    assert pair["choices"]["items"]["maxLength"] == 40 and pair["choices"]["maxItems"] == 2
    assert capped["properties"]["pairs"]["minItems"] == 3 and capped["properties"]["pairs"]["maxItems"] == 3
    assert cap_strings({"type": "string", "maxLength": 10}, 40)["maxLength"] == 10
    # a listed value keeps its length: capped to 12, "multiple_choice" would break its own schema
    assert "maxLength" not in cap_strings(DiverseQA.model_json_schema(), 12)["$defs"]["MultipleChoiceQA"][
        "properties"]["question_type"]
    assert cap_strings({"type": "string", "enum": ["a" * 20]}, 12) == {"type": "string", "enum": ["a" * 20]}


# ------------------------------------------------------------------ seed data

def test_curator_jsonl_seed_and_its_stats(tmp_path):
    rows = [{"id": f"doc{i}", "text": "x" * (100 + 10 * i), "title": f"T{i}", "url": f"https://e/{i}",
             "categories": ["news" if i % 3 else "science"]} for i in range(40)]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    records, files = load_seed(str(tmp_path), num_documents=5, seed=0)
    assert files == [tmp_path / "a.jsonl"] and len(records) == 5
    assert records == sorted(records, key=lambda r: r["id"]) and records == load_seed(str(tmp_path), num_documents=5)[0]
    stats = seed_stats(records)
    lengths = [len(r["text"]) for r in records]
    assert stats["documents"] == 5 and stats["chars"]["min"] == min(lengths) and stats["chars"]["max"] == max(lengths)
    assert stats["approx_tokens"] == sum(lengths) // 4 and sum(stats["categories"].values()) == 5
    (tmp_path / "b.jsonl").write_text('{"id": "doc1", "text": "again"}\n')
    with pytest.raises(NemotronError, match="duplicate id 'doc1'"):
        load_seed(str(tmp_path), num_documents=5)


def test_shakespeare_seeds_are_train_split_scenes():
    from nemotron.data_prep.blend import assign_split, default_pretrain_blend

    records, _ = load_seed("shakespeare", num_documents=3, seed=0)
    assert len(records) == 3 and all(r["id"].startswith("shakespeare/") for r in records)
    assert all(assign_split(r["id"], default_pretrain_blend().split) == "train" for r in records)
    assert all(" act " in r["title"] and r["categories"] for r in records)


# ------------------------------------------------------------------ the bill and the arithmetic

def test_compute_bill_arithmetic():
    tokens = {"wikipedia_rephrase": {"prompt_tokens": 600, "completion_tokens": 400},
              "diverse_qa": {"prompt_tokens": 500, "completion_tokens": 500}}
    bill = cost.bill(tokens, documents=4, peak_flops=1e15, mfu=0.5)
    total = bill["strategies"]["total"]
    assert total["tokens"] == 2000
    assert total["dense-8B"]["flops"] == 2 * 8e9 * 2000 and total["moe-30B-A3B"]["flops"] == 2 * 3e9 * 2000
    assert total["dense-8B"]["gpu_hours"] == pytest.approx(2 * 8e9 * 2000 / (1e15 * 0.5) / 3600)
    assert total["dense-8B"]["projected_gpu_hours"]["1000x"] == pytest.approx(1000 * total["dense-8B"]["gpu_hours"])
    assert bill["rephrasers"]["dense-8B"]["bf16_weight_gb"] == 16
    assert bill["rephrasers"]["moe-30B-A3B"]["bf16_weight_gb"] == 60
    assert cost.critical_batch_size(989e12, 3.35e12) == pytest.approx(295.2, abs=0.1)
    assert cost.effective_mfu(1e9, 100, 1e12) == pytest.approx(0.2)
    assert cost.effective_mfu(3.2e9, 50_000, 989e12, devices=2) == pytest.approx(2 * 3.2e9 * 50_000 / (2 * 989e12))
    assert "moe-30B-A3B" in cost.format_bill(bill)


# ------------------------------------------------------------------ the lab's scale: whole documents


def test_the_whole_documents_preset_sets_the_labs_settings_and_a_flag_beside_it_wins():
    from nemotron.cli import parse

    default = parse(synthetic_data.main, [], synthetic_data.PRESETS)
    assert (default.preset, default.max_seed_chars, default.endpoint.max_tokens) == (None, 1500, 256)
    lab = parse(synthetic_data.main, ["--preset", "whole-documents", "--endpoint.model", "nemotron-3-nano"],
                synthetic_data.PRESETS)
    assert (lab.preset, lab.max_seed_chars, lab.endpoint.model) == ("whole-documents", None, "nemotron-3-nano")
    assert (lab.endpoint.max_tokens, lab.endpoint.temperature) == (2048, 0.7)
    assert lab.endpoint.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    mine = parse(synthetic_data.main, ["--preset", "whole-documents", "--endpoint.max-tokens", "1024"],
                 synthetic_data.PRESETS)
    assert (mine.endpoint.max_tokens, mine.endpoint.temperature, mine.max_seed_chars) == (1024, 0.7, None)
    # the whole document reaches the prompt (and the judge), not its first 1,500 characters
    records, _ = load_seed("shakespeare", num_documents=40)
    longest = max(records, key=lambda r: len(r["text"]))
    assert len(longest["text"]) > 2 * 1500
    [whole] = [m["content"] for m in render(BUILTIN["distill"], longest, lab.max_seed_chars) if m["role"] == "user"]
    [cut] = [m["content"] for m in render(BUILTIN["distill"], longest, default.max_seed_chars) if m["role"] == "user"]
    assert longest["text"] in whole and longest["text"] not in cut


def test_a_negative_gpu_count_or_active_parameter_count_is_refused_before_any_request():
    for bad in ({"num_gpus": -1}, {"active_params": 0.0}):
        config = synthetic_data.Config(num_documents=2, endpoint=dead_endpoint(), **bad)
        with pytest.raises(NemotronError, match="--num-gpus .* --active-params"):
            synthetic_data.main(config)


# ------------------------------------------------------------------ client refusals

def test_api_key_variable_not_set_is_one_line():
    os.environ.pop("NEMOTRON_TEST_SDG_KEY", None)
    with pytest.raises(NemotronError, match="the API key variable NEMOTRON_TEST_SDG_KEY is not set"):
        Client(Endpoint(api_key_env="NEMOTRON_TEST_SDG_KEY"))


def test_extra_body_is_a_json_object_on_the_command_line():
    import tyro

    flag = ["--endpoint.extra-body", '{"chat_template_kwargs": {"enable_thinking": false}}']
    config = tyro.cli(synthetic_data.Config, args=flag)
    assert config.endpoint.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    assert tyro.cli(synthetic_data.Config, args=[]).endpoint.extra_body == {}
    with pytest.raises(NemotronError, match="expected a JSON object"):
        tyro.cli(synthetic_data.Config, args=["--endpoint.extra-body", "[1]"])


def test_endpoint_down_names_the_url_after_the_retries():
    endpoint = dead_endpoint()
    with pytest.raises(EndpointDown) as error:
        Client(endpoint).check()
    message = str(error.value)
    assert endpoint.url in message and "after 2 attempts" in message and "\n" not in message


def test_a_torn_last_line_is_cut_off(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"key": "a", "text": "x"}\n{"key": "b", "te')
    assert list(read_records(path)) == ["a"]
    assert path.read_text() == '{"key": "a", "text": "x"}\n'


def test_strategy_dataclass_is_the_extension_point():
    custom = Strategy("haiku", "Write a haiku about {{ title }}.")
    rendered = render(custom, {"id": "1", "text": "", "title": "the sea"}, 10)
    assert rendered[1]["content"] == "Write a haiku about the sea."
