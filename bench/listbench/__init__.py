"""The parts of ``bench/list.py`` beside its timing: the store it lists (``store``) and the
query plans it prints (``plans``). A package, not scripts of their own: every ``bench/*.py``
is a benchmark that answers ``--help``."""
