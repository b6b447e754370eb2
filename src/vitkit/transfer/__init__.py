"""Transfer: the paper's two evaluation protocols on a checkpoint, each a sweep of fine-tuning runs.

``finetuning``: the paper's transfer protocol (``vitkit transfer``: per dataset, a learning rate
chosen on a holdout, then a final run) and its table; ``vtab``: VTAB-1k (``vitkit vtab``);
``sweep``: what both share, runs under one folder with a JSON record, resumable after a kill at
any point, and the choice among them; ``paper``: the paper's settings per dataset and its
reported numbers, as data. They drive training, so they sit above ``train`` and ``compose``
(tests/test_layering.py).
"""
