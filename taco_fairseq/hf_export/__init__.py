"""Export fairseq RoBERTa checkpoints (TACO, MLM, fine-tuned ``sentence_prediction``) to
HuggingFace transformers, checked against fairseq on real text (``pip install -e ".[hf]"``).

* :mod:`.weights`: the transformers configuration and state dict of a fairseq RoBERTa;
* :mod:`.tokenizer`: the transformers tokenizer that gives fairseq's token ids;
* :mod:`.check_text`: real text for the check, and its hard cases;
* :mod:`.parity`: the check (token ids, logits);
* :mod:`.export`: the whole export (``taco-export-hf``);
* :mod:`.compat`: lets transformers import next to an unloadable torchaudio; run on import.
"""

from .compat import hide_unloadable_torchaudio

hide_unloadable_torchaudio()
