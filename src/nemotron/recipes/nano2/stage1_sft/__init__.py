"""nano2 stage 1: supervised fine-tuning (SFT) on chat conversations, loss on assistant tokens only.

Steps: data_curation (-> SFTDataset), training (-> SFTCheckpoint), evaluation (-> SFTResults).
"""
