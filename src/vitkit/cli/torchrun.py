"""``python -m vitkit.cli.torchrun ARGS``: torchrun (``torch.distributed.run``, PyTorch's own
launcher, with ``ARGS`` as its own) for ``--nproc N`` (cli/training.py), with a stop said in one
line. A SIGTERM or SIGINT to the job's process group reaches torchrun's agent and its processes
alike: the processes save and stop (train/loop.py), the agent passes the signal on to them, waits
for them, then raises ``SignalException``, which torchrun would end in a traceback and exit
status 1; here it is one line and 128 + the signal's number, the status of the processes."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.run import main as torchrun

    try:
        torchrun(argv)
    except SignalException as e:
        print(
            f"torchrun: stopped by signal {int(e.sigval)}, passed on to its processes",
            file=sys.stderr,
        )
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
