"""Synthetic pretraining data by document rephrasing (Nemotron-CC, BeyondWeb): see README.md beside this file."""
