"""How vitkit runs fast on a given machine: the process's memory allocator (``allocator``) and
the fast inference path (``inference``). Nothing here changes what a model computes."""
