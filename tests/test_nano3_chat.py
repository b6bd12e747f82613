"""The nano3 chat format against the published Nemotron 3 Nano template's behaviour, and its loss masks.

`PUBLISHED` records what the template NVIDIA publishes for Nemotron 3 Nano renders on 13 conversations:
NVIDIA-NeMo/Nemotron at commit e27b37133d65, `src/nemotron/data_prep/templates/nano3.jinja`, rendered
once with transformers 5.23's `render_jinja_template` (reasoning off = `chat_template_kwargs=
{"enable_thinking": False}`). We keep its output as facts, not its code. Our Python renderer, our own
Jinja template and our tokenization must all reproduce those strings.
"""

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from nemotron.data_prep.chat.nano3 import (
    NANO3_CHAT_TEMPLATE,
    render_nano3,
    split_reasoning,
    tokenize_nano3_conversation,
    tokenize_nano3_prompt,
)
from nemotron.data_prep.chat.templates import chat_template_named
from nemotron.data_prep.tokenizer import load_tokenizer, train_tokenizer
from nemotron.errors import NemotronError

# (name, messages, add_generation_prompt, enable_thinking, the published template's output)
PUBLISHED = [
    ('prompt_thinking_on', [{'role': 'user', 'content': 'What is 2+3?'}], True, True,
     '<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n<think>\n'),
    ('prompt_thinking_off', [{'role': 'user', 'content': 'What is 2+3?'}], True, False,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>')),
    ('system_prompt_off', [{'role': 'system', 'content': 'Be brief.'}, {'role': 'user', 'content': 'Hi'}],
     True, False,
     '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think></think>'),
    ('reasoning_turn', [{'role': 'system', 'content': 'Be brief.'},
                        {'role': 'user', 'content': 'What is 2+3?'},
                        {'role': 'assistant', 'reasoning_content': '2 plus 3 is 5.', 'content': '5'}],
     False, True,
     ('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n'
      '<think>\n2 plus 3 is 5.\n</think>\n5<|im_end|>\n')),
    ('no_reasoning_turn', [{'role': 'user', 'content': 'Hi'}, {'role': 'assistant', 'content': 'Hello!'}],
     False, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>Hello!<|im_end|>\n')),
    ('multi_turn_history', [{'role': 'user', 'content': '2+3?'},
                            {'role': 'assistant', 'reasoning_content': 'add: 5', 'content': '5'},
                            {'role': 'user', 'content': 'times 2?'},
                            {'role': 'assistant', 'reasoning_content': '5*2=10', 'content': '10'}],
     False, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n<think></think>\n'
      '5<|im_end|>\n<|im_start|>user\ntimes 2?<|im_end|>\n<|im_start|>assistant\n<think>\n5*2=10\n</think>\n'
      '10<|im_end|>\n')),
    ('multi_turn_prompt', [{'role': 'user', 'content': '2+3?'},
                           {'role': 'assistant', 'reasoning_content': 'add: 5', 'content': '5'},
                           {'role': 'user', 'content': 'times 2?'}],
     True, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n<think></think>\n'
      '5<|im_end|>\n<|im_start|>user\ntimes 2?<|im_end|>\n<|im_start|>assistant\n<think>\n')),
    ('tool_call', [{'role': 'user', 'content': 'Weather in Paris?'},
                   {'role': 'assistant',
                    'reasoning_content': 'Need the tool.',
                    'content': '',
                    'tool_calls': [{'type': 'function',
                                    'function': {'name': 'get_weather', 'arguments': {'city': 'Paris', 'days': 2}}}]},
                   {'role': 'tool', 'content': '{"temp": 18}'},
                   {'role': 'assistant', 'content': '18 degrees.'}],
     False, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n'
      '<think>\nNeed the tool.\n</think>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n'
      '</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\n'
      '<tool_response>\n{"temp": 18}\n</tool_response>\n<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>18 degrees.<|im_end|>\n')),
    ('two_tool_results', [{'role': 'user', 'content': 'a and b'},
                          {'role': 'assistant',
                           'content': '',
                           'tool_calls': [{'function': {'name': 'f', 'arguments': {'x': 'a'}}},
                                          {'function': {'name': 'f', 'arguments': {'x': 'b'}}}]},
                          {'role': 'tool', 'content': 'A'},
                          {'role': 'tool', 'content': 'B'}],
     True, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\na and b<|im_end|>\n<|im_start|>assistant\n<think></think>\n'
      '<tool_call>\n<function=f>\n<parameter=x>\na\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n'
      '<function=f>\n<parameter=x>\nb\n</parameter>\n</function>\n</tool_call>\n<|im_end|>\n<|im_start|>user\n'
      '<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>\n<|im_end|>\n'
      '<|im_start|>assistant\n<think>\n')),
    ('history_tool_call', [{'role': 'user', 'content': 'Weather?'},
                           {'role': 'assistant',
                            'reasoning_content': 'Use it.',
                            'content': 'Checking.',
                            'tool_calls': [{'function': {'name': 'w', 'arguments': {'q': [1, 2]}}}]},
                           {'role': 'tool', 'content': 'sun'},
                           {'role': 'assistant', 'content': 'Sunny.'},
                           {'role': 'user', 'content': 'Thanks'}],
     True, False,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>Checking.\n<tool_call>\n<function=w>\n<parameter=q>\n[1, 2]\n</parameter>\n</function>\n'
      '</tool_call>\n<|im_end|>\n<|im_start|>user\n<tool_response>\nsun\n</tool_response>\n<|im_end|>\n'
      '<|im_start|>assistant\n<think></think>Sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n'
      '<|im_start|>assistant\n<think></think>')),
    ('reasoning_no_answer', [{'role': 'user', 'content': 'x'},
                             {'role': 'assistant', 'reasoning_content': ' hmm ', 'content': '  '}],
     False, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n hmm \n'
      '</think><|im_end|>\n')),
    ('whitespace_reasoning', [{'role': 'user', 'content': 'x'},
                              {'role': 'assistant', 'reasoning_content': '\n\n', 'content': 'ok  '}],
     False, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>ok<|im_end|>\n')),
    ('history_no_reasoning', [{'role': 'user', 'content': 'a'},
                              {'role': 'assistant', 'content': 'b '},
                              {'role': 'user', 'content': 'c'}],
     True, True,
     ('<|im_start|>system\n<|im_end|>\n<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n'
      '<think></think>b<|im_end|>\n<|im_start|>user\nc<|im_end|>\n<|im_start|>assistant\n<think>\n')),
]


@pytest.mark.parametrize("name, messages, prompt, thinking, expected", PUBLISHED, ids=[c[0] for c in PUBLISHED])
def test_python_renderer_matches_the_published_template(name, messages, prompt, thinking, expected):
    assert render_nano3(messages, add_generation_prompt=prompt, enable_thinking=thinking) == expected


@pytest.mark.parametrize("name, messages, prompt, thinking, expected", PUBLISHED, ids=[c[0] for c in PUBLISHED])
def test_our_jinja_template_matches_the_published_template(name, messages, prompt, thinking, expected):
    # both ways of switching reasoning off: the transformers keyword and vLLM's chat_template_kwargs
    for switch in ({"enable_thinking": thinking}, {"chat_template_kwargs": {"enable_thinking": thinking}}):
        rendered = render_jinja_template([messages], chat_template=NANO3_CHAT_TEMPLATE,
                                         add_generation_prompt=prompt, **switch)[0][0]
        assert rendered == expected


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    corpus = [render_nano3(case[1], case[2], case[3]) for case in PUBLISHED] * 10
    folder = tmp_path_factory.mktemp("tok") / "nano3"
    train_tokenizer(corpus, vocab_size=400, output_dir=folder, chat_template=chat_template_named("nano3").jinja)
    return load_tokenizer(folder)


@pytest.mark.parametrize("name, messages, prompt, thinking, expected",
                         [c for c in PUBLISHED if not c[2]], ids=[c[0] for c in PUBLISHED if not c[2]])
def test_tokens_decode_to_the_published_text_and_the_mask_is_exact(tokenizer, name, messages, prompt, thinking,
                                                                    expected):
    ids, mask = tokenize_nano3_conversation(tokenizer, messages, train_reasoning=True)
    assert tokenizer.decode(ids) == expected
    trained = tokenizer.decode([i for i, m in zip(ids, mask) if m])
    last = messages[-1]
    # the trained text is the last turn after its generation prompt: reasoning, answer, <|im_end|>
    assert trained.endswith("<|im_end|>") and "<|im_start|>" not in trained and "<think>\n" not in trained
    reasoning = (last.get("reasoning_content") or "").strip()
    if reasoning:
        assert trained.startswith(last["reasoning_content"] + "\n</think>")
        ids_off, mask_off = tokenize_nano3_conversation(tokenizer, messages, train_reasoning=False)
        assert ids_off == ids
        trained_off = tokenizer.decode([i for i, m in zip(ids_off, mask_off) if m])
        assert trained_off == expected.rsplit("</think>", 1)[1].removeprefix("\n").removesuffix("\n")
        assert reasoning not in trained_off


def test_history_turns_are_context_only(tokenizer):
    messages = PUBLISHED[5][1]  # multi_turn_history
    ids, mask = tokenize_nano3_conversation(tokenizer, messages)
    assert tokenizer.decode([i for i, m in zip(ids, mask) if m]) == "5*2=10\n</think>\n10<|im_end|>"


def test_prompt_tokens_are_the_training_prefix_with_the_switch(tokenizer):
    messages = PUBLISHED[3][1]  # reasoning_turn
    ids, _ = tokenize_nano3_conversation(tokenizer, messages)
    on = tokenize_nano3_prompt(tokenizer, messages[:-1], enable_thinking=True)
    assert ids[: len(on)] == on and tokenizer.decode(on).endswith("assistant\n<think>\n")
    off = tokenize_nano3_prompt(tokenizer, messages[:-1], enable_thinking=False)
    assert tokenizer.decode(off).endswith("assistant\n<think></think>")


def test_reasoning_is_split_from_the_answer():
    assert split_reasoning("2 plus 3 is 5.\n</think>\n5") == ("2 plus 3 is 5.", "5")
    assert split_reasoning("still thinking") == (None, "")


@pytest.mark.parametrize("messages, fragment", [
    ([{"role": "robot", "content": "x"}], "role 'robot'"),
    ([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}], "only the first"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": '{"a": 1}'}}]}], "json.loads"),
    ([{"role": "user", "content": "x"}], "no assistant turn after the last user message"),
])
def test_bad_conversations_are_one_clear_error(tokenizer, messages, fragment):
    with pytest.raises(NemotronError, match=fragment):
        tokenize_nano3_conversation(tokenizer, messages)


def test_templates_are_selectable_by_name():
    assert chat_template_named("nano3").jinja == NANO3_CHAT_TEMPLATE
    with pytest.raises(NemotronError, match="unknown chat template 'nano4'; use one of nano2, nano3"):
        chat_template_named("nano4")
