"""Same-run comparison of pre-training objectives (paper §4, Figure 5, Table 1): pre-train
each objective with the same data, seed, initialization, batches, masks and schedule,
fine-tune every checkpoint on GLUE, and report the paired difference and the speed-up.

``taco-compare`` is the command; docs/results.md the study it produced.
"""
