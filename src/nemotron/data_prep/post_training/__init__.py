"""The post-training data library: family readers -> Harmony-normalized records, the Parquet schema,
the receipted normalize run, candidate pools, and score / diversity selection."""
