"""Measuring what TACO costs over masked-LM pre-training (``python -m benchmarks``,
``python -m benchmarks``); a development tool, not installed with the package.

* :mod:`.update_timing`: fairseq ``Trainer.train_step`` of two criteria, interleaved, each in
  its own process (update time, tokens per second, peak memory);
* :mod:`.collate_timing`: the data loader's collate with and without TACO's sampling;
* :mod:`.tc_loss_timing`: the TC loss alone, the fast implementation against the gather of an
  ``[anchors, K, hidden]`` tensor;
* :mod:`.report`: the markdown tables and the environment they were measured in.
"""
