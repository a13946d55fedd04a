"""The command-line tools, one module per command with ``main(argv=None)``, installed as the
``taco-*`` console scripts of ``setup.py`` (``scripts/*.py`` call the same functions). Like
``fairseq_cli``, nothing here is part of the plugin: ``import taco_fairseq`` loads none of it.
"""
