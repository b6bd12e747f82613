"""Chat formats: how a conversation becomes text, token ids and a loss mask.

    pieces.py     the rule every format follows: a render is a list of pieces, markers (special
                  tokens the renderer emits) kept apart from text (content, headers) by kind, and
                  the piece-by-piece encoder that gives ids plus an exact loss mask
    nano2.py      the nano2 format (ChatML): system / user / assistant text
    nano3.py      the nano3 format: ChatML plus reasoning on/off and tool calls
    harmony.py    the Harmony format of gpt-oss (its own o200k vocabulary), render and parse
    records.py    post-training records (Harmony-normalized) -> each template's conversations and masks
    templates.py  the chat templates by name ("nano2", "nano3"): the one list that steps, the SFT
                  pipeline and the packed-Parquet writer look a `chat_template=` name up in

Harmony is not among the template names: it is spoken by its own tokenizer, not by a Jinja template
saved with ours.
"""
