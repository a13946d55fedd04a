"""Data preparation: raw text -> pre-training data-bin; GLUE TSV -> data-bin."""
