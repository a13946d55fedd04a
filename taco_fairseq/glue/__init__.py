"""GLUE fine-tuning and evaluation of pre-trained checkpoints (the paper's §4 protocol)."""
