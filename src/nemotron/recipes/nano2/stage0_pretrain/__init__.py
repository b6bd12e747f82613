"""nano2 stage 0: pretraining from scratch on curated raw text.

Steps: data_curation (-> PretrainDataset), training (-> PretrainCheckpoint), evaluation (-> PretrainResults).
"""
