"""Models: configs per scale (`nano2`), loading a saved model (`loading`), and "does this fit it" checks.

Importing the package is light (no torch, no transformers), so a data-curation step can check its
data against a model folder without loading the model stack; `nemotron.models.nano2` and
`load_model` import them when used.
"""
