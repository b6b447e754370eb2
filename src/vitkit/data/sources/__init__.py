"""Where images come from: each source numbers its images 0..n-1 and gives each one's label, name
and encoded bytes (data/contract.py), which the one container (data/decoded.py) decodes and checks;
each kind of data spec lists its splits (``listing``), found by kind in registry.py.

Sources: class folders (folder.py), webdataset tar shards (shards.py), Hugging Face datasets
(hf.py, their cells: cells.py) and parquet read as a stream (parquet.py), VTAB-1k lists
(lists.py); the named datasets held in memory: Fashion-MNIST, CIFAR (found through paths.py) and
synthetic images.
"""
