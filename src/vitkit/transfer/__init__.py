"""Transfer: the paper's fine-tuning protocol on a checkpoint (``vitkit transfer``).

``paper``: the paper's settings per dataset and its reported numbers, as data; ``sweep``: runs
under one folder with a JSON record, resumable after a kill at any point, and the choice among
them (``vitkit vtab``'s runs too: vtab.py sits one layer above); ``protocol``: the protocol
itself and its table. It drives training, so it sits above ``train`` and ``compose``
(tests/test_layering.py).
"""
