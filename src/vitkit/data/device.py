"""Host to device: a batch's way from the loader (uint8 images, in page-locked memory for a GPU)
to the model's device, where it is scaled to [-1, 1] (``transforms.to_float``).

Batches stay uint8 on the host (a quarter of float32's bytes to copy) and are copied with
``non_blocking=True``, so the copy from pinned memory does not wait for the host. ``to_input``
moves one batch of images (evaluation, few-shot, masked patch prediction); ``on_device`` moves
the training loop's micro-batches, on CUDA one ahead on a side stream so that the copy and the
scaling overlap the step that runs.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import torch
from torch import Tensor

from .transforms import to_float


def to_input(images: Tensor, device: torch.device) -> Tensor:
    """A batch as the model takes it, on ``device``: copied there (without waiting, from pinned
    memory) and, if uint8, scaled to [-1, 1] there."""
    images = images.to(device, non_blocking=True)
    return to_float(images) if images.dtype == torch.uint8 else images


def on_device(
    batches: Iterator[tuple[Tensor, Tensor]], device: torch.device
) -> Generator[tuple[Tensor, Tensor]]:
    """Each (uint8 images, labels) micro-batch on ``device``, scaled there. On CUDA the next
    micro-batch's copy (from page-locked memory) and scaling are issued on a side stream before
    the current one is handed over, so they run while the device computes this step; the step's
    stream waits for them only when it takes that batch. Elsewhere one after the other."""
    if device.type != "cuda":
        for images, labels in batches:
            yield to_input(images, device), labels.to(device)
        return
    side = torch.cuda.Stream(device)

    def issue(batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        with torch.cuda.stream(side):
            images, labels = batch
            return to_input(images, device), labels.to(device, non_blocking=True)

    it = iter(batches)
    ahead = next(it, None)
    ready = None if ahead is None else issue(ahead)
    while ready is not None:
        compute = torch.cuda.current_stream(device)
        compute.wait_stream(side)  # this batch's copy is done before the step reads it
        for tensor in ready:
            tensor.record_stream(compute)  # its memory is not reused while the step runs
        following = next(it, None)
        current, ready = ready, None if following is None else issue(following)
        yield current
