"""Terminal chat with any checkpoint the recipes make: `python -m nemotron.chat [ARTIFACT_OR_FOLDER]`.

It runs the server's decoding engine in-process (`nemotron.serve.engine`), so the terminal and the API
answer alike. See `__main__.py`.
"""
