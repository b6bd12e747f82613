"""nano3 stage 0: pretraining the MoE model and its dense counterpart on nano2's curated shards."""
