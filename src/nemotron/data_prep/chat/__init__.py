"""Chat formats: templates, and the converters that turn post-training records into their conversations."""
