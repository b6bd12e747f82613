"""nano3 stage 1: SFT on worked, checkable problems (reasoning on and off) and nano2's chat data."""
