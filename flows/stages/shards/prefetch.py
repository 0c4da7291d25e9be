"""Runs an iterator in a background thread a few items ahead of its consumer.

`tokenizers` releases the GIL while it encodes, so reading and cleaning the next batch in a thread
overlaps Python work with encoding: on two cores this is worth more than a second process.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")
_END = object()


def prefetched(items: Iterator[T], depth: int = 4) -> Iterator[T]:
    """Yields `items` in order; an error raised while producing them is raised here."""
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stopped = threading.Event()

    def offer(item: object) -> bool:
        while not stopped.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as error:  # handed to the consumer, which re-raises it
            offer(error)

    worker = threading.Thread(target=produce, name="prefetch", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        stopped.set()
        worker.join()
