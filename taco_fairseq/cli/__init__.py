"""The command-line tools, one module per command with ``main(argv=None)``, installed as the
``taco-*`` console scripts of ``setup.py``, and the option groups they share (``argtypes``,
``glue_options``, ``analysis_options``). The top layer: imports flow cli → tools (``prep/``,
``glue/``, ``analysis/``, ``hf_export/``, ``comparison/``) → plugin, and no tool imports this
package (``tests/test_plugin.py`` checks both). Like ``fairseq_cli``, nothing here is part of
the plugin: ``import taco_fairseq`` loads none of it.
"""
