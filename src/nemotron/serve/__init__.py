"""One model server for every checkpoint the recipes make and for the SDG reference model.

    python -m nemotron.serve runs/nano2/stage2_alignment/training --port 8000   # then open http://127.0.0.1:8000/

- `__main__.py`  the command: load the models, start one engine per model, serve on 127.0.0.1
- `app.py`       OpenAI-compatible HTTP API (FastAPI): chat and text completions, streaming, token
                 log-probabilities and prompt scoring (echo), checked settings, models, the page
- `engine.py`    batched decoding with streaming, stop strings, cancellation and xgrammar structured outputs
- `models.py`    what is served: checkpoint artifact, HF folder or SmolLM2; its own chat format
- `reasoning.py` nano3's reasoning apart from its answer, also while the text streams
- `where_from.py` POST /v1/trace: a text's spans in a served checkpoint's training data (`nemotron.trace`)
- `page.html`    the chat page served at `/` (static HTML + JS, works offline)
"""
