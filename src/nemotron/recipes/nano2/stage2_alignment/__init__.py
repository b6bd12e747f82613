"""nano2 stage 2: preference alignment with DPO against the frozen SFT model.

Steps: data_curation (-> PreferenceDataset), training (-> DPOCheckpoint), evaluation (-> DPOResults).
"""
