"""The post-training data pipeline: normalize -> pools -> score -> select (see README.md)."""
