"""How vitkit runs models: the process's memory allocator (``allocator``), the arithmetic ``auto``
stands for (``arithmetic``), the ``openvino`` extra (``openvino``), torchao's import without
torch's log about it (``torchao``), a module's eval mode for a block (``mode``), the process clock
(``clock``), the cores it may use (``cores``) and stop requests (``stops``).
Nothing here changes what a model's weights compute. Imports only torch, so every part of vitkit
may use it."""
