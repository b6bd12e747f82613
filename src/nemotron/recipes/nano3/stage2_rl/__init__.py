"""nano3 stage 2: GRPO on the verifiable addition task, and SFT vs RL on held-out problems."""
