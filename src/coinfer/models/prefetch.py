"""Reading a memory-mapped model's weights ahead of its forward, within a memory budget.

A model larger than its memory budget runs from its memory-mapped file: every forward
faults its weights in (a few pages at a time) and the page cache drops them again. The
``WeightPrefetcher`` has them read in the order the next forward uses them
(``gguf_layout.forward_order``) while the draft computes (LLMCad §3.4, Figure 11):
``warm()`` starts from the first layer and asks the kernel to read ahead
(``posix_fadvise(WILLNEED)``, 8 MiB at a time from a worker thread; copying through user
memory with ``preadv`` took CPU time from the draft) up to the *headroom* the budget
leaves: the budget less the process's resident anonymous memory (the draft's weights,
the caches) and a reserve. So loading stops before the memory upper bound and never
pushes the draft out; the target's forward finds its first layers read and faults in the
rest. ``pause()`` stops the worker after its current chunk.

During the forward it reads on only as the forward gets on (``follow()``): a model
that reports its layers (``SteerableModel.layer_listener``; llama.cpp loaded with
``layer_progress``) tells it each layer it finishes, and it stays at most a window of
bytes ahead of that layer, so the disk reads the next layers while the CPU computes this
one and nothing it read is evicted before use. (Reading ahead without knowing where the
forward is overtook it by more than the headroom: 2.0 GB read per forward of a 1.1 GB
file, against 1.5 GB with no prefetcher.) It also tells the kernel the mapping is read
in order (``madvise(MADV_SEQUENTIAL)``): a page fault then reads ahead of itself rather
than around itself, half of which, behind the fault, the forward had used and the
budget had dropped (a 48-token forward of the 1.1 GB file in an 820 MiB cgroup,
``read_ahead_kb`` 8192, two runs of docs/bench/llmcad/checks/forward_reads.py: 1.42 and
1.34 GB read in 1.99 and 1.82 s with the default advice, 1.22 and 1.06 GB in 1.95 and
1.80 s sequential, 1.06 and 1.09 GB in 1.62 and 1.60 s sequential and followed).
Bytes the process reads from disk, whoever reads them, are in ``/proc/self/io``
(``disk_bytes_read``).
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from itertools import accumulate
from pathlib import Path

from coinfer.errors import BudgetError, ConfigError
from coinfer.models.base import SteerableModel
from coinfer.models.gguf_layout import TensorSpan, forward_order, layer_of, read_tensor_table

__all__ = [
    "WeightPrefetcher",
    "advise_sequential",
    "disk_bytes_read",
    "parse_size",
    "resident_anonymous_bytes",
]

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
CHUNK = 8 * 1024 * 1024
RESERVE = 96 * 1024 * 1024  # libraries' pages, Python's heap growth, the kernel's slack
FOLLOW_WINDOW = 32 * 1024 * 1024  # how far ahead of the forward's layer it reads, at most
_MADV_SEQUENTIAL = 2


def parse_size(text: str) -> int:
    """Bytes from ``800M``, ``1.5G``, ``512MiB`` or a plain byte count (powers of 1024)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(
            f"cannot read {text!r} as a memory size", hint="write it like 800M, 1.5G or 900000000"
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def resident_anonymous_bytes() -> int:
    """The process's resident anonymous memory (heap, model buffers loaded without mmap,
    KV caches); 0 where ``/proc`` is not there."""
    total = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def disk_bytes_read() -> int | None:
    """Bytes this process has caused to be read from storage (``/proc/self/io``), or None."""
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def advise_sequential(path: str | Path) -> int:
    """Tell the kernel that this process's mappings of ``path`` are read in order
    (``madvise(MADV_SEQUENTIAL)``); how many mappings it advised (0 where it cannot)."""
    target = str(Path(path).resolve())
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/self/maps") as f:
            ranges = [line.split()[0] for line in f if line.rstrip("\n").endswith(" " + target)]
    except (OSError, AttributeError):
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for r in ranges:
        lo, hi = (int(x, 16) for x in r.split("-"))
        done += libc.madvise(lo, hi - lo, _MADV_SEQUENTIAL) == 0
    return done


class WeightPrefetcher:
    """Reads ``path``'s tensors ahead of the forward, keeping within ``budget`` bytes.
    ``bytes_read``: how much it has asked the kernel to read ahead. With ``model`` (whose
    weights ``path`` holds) it listens to the layers the model's forwards finish, which
    ``follow()`` needs; ``close()`` stops listening."""

    def __init__(
        self,
        path: str | Path,
        budget: int,
        *,
        reserve: int = RESERVE,
        model: SteerableModel | None = None,
    ) -> None:
        self.spans = forward_order(read_tensor_table(path))
        self.budget, self.reserve = budget, reserve
        self.bytes_read = 0
        self.window = 0  # how far ahead of the forward the last follow() reads
        self.sequential = advise_sequential(path) > 0
        self._starts = [0, *accumulate(s.size for s in self.spans)]  # bytes before each span
        self._layer_spans = _first_span_of_each_layer(self.spans)
        firsts = sorted(self._layer_spans.values())  # the layers' spans lie back to back
        self._largest_layer = max(
            (self._starts[b] - self._starts[a] for a, b in zip(firsts, firsts[1:], strict=False)), default=0
        )
        self._fd = os.open(path, os.O_RDONLY)
        self._lock = threading.Condition()
        self._plan: tuple[int, str, int] | None = None  # (generation, mode, allowance) to carry out
        self._generation = 0
        self._cursor = (0, 0)  # (span index, offset within it)
        self._forward_at = 0  # the span the forward reads next, as its layers report
        self._closed = False
        self._model = model
        if model is not None:
            model.layer_listener = self.layer_done
        self._worker = threading.Thread(target=self._run, name="weight-prefetch", daemon=True)
        self._worker.start()

    def check_room(self) -> None:
        """Refuse a budget that leaves the weights less than two of the largest layers
        (the one computed and the one read ahead): every forward would thrash, re-reading
        pages it has just read, slower than the target alone."""
        resident = resident_anonymous_bytes()
        room, need = self.budget - resident, 2 * self._largest_layer
        if room < need:
            raise BudgetError(
                f"a memory budget of {self.budget >> 20} MiB leaves {max(room, 0) >> 20} MiB for the "
                f"target's weights after the resident draft, caches and buffers ({resident >> 20} MiB); "
                f"it needs at least {need >> 20} MiB",
                hint=f"raise --memory-budget to at least {-(-(resident + need) // 2**20)}M",
            )

    def headroom(self) -> int:
        """What the budget leaves for the target's pages now."""
        return max(0, self.budget - resident_anonymous_bytes() - self.reserve)

    def warm(self) -> None:
        """Start over from the first layer, reading up to the headroom (the draft computes)."""
        self._command("warm", self.headroom(), restart=True)

    def follow(self, *, from_start: bool = False) -> None:
        """Read on as the forward about to run gets on, at most a window ahead of the
        layer it is in (a third of what the budget leaves, up to 32 MiB): from where
        ``warm()`` got to, or ``from_start``. Without a model that reports its layers,
        this is ``pause()``."""
        if self._model is None:
            return self.pause()
        room = max(0, self.budget - resident_anonymous_bytes())
        self.window = max(CHUNK, min(FOLLOW_WINDOW, room // 3))
        self._command("follow", self.window, restart=from_start)

    def pause(self) -> None:
        """Stop reading after the current chunk."""
        self._command("pause", 0, restart=False)

    def layer_done(self, layer: int) -> None:
        """The forward has computed ``layer``; it reads the next one now (the first layer
        again, when a new forward began)."""
        with self._lock:
            at = self._layer_spans.get(layer + 1, self._layer_spans["tail"])
            # a new forward began, or the cursor is behind: never read what it has passed
            if at < self._forward_at or self._cursor[0] < at:
                self._cursor = (at, 0)
            self._forward_at = at
            self._lock.notify()

    def _command(self, mode: str, allowance: int, *, restart: bool) -> None:
        with self._lock:
            self._generation += 1
            if restart:
                self._cursor = (0, 0)
                self._forward_at = 0
            self._plan = (self._generation, mode, allowance)
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._plan is None and not self._closed:
                    self._lock.wait()
                plan, self._plan = self._plan, None
            if plan is None:  # closed
                return
            self._read(*plan)

    def _read(self, generation: int, mode: str, allowance: int) -> None:
        """Read chunks from the cursor on until a newer command or the end of the weights:
        in "warm", ``allowance`` bytes in all; in "follow", while the cursor is less than
        ``allowance`` bytes ahead of the forward (waiting for it otherwise)."""
        while allowance > 0:
            with self._lock:
                while mode == "follow" and self._current(generation) and not self._behind(allowance):
                    self._lock.wait()
                if not self._current(generation):
                    return
                index, offset = self._cursor
                if index >= len(self.spans):
                    return
                span = self.spans[index]
                limit = allowance if mode == "warm" else allowance - self._ahead()
                n = min(CHUNK, span.size - offset, limit)
                self._cursor = (index + 1, 0) if offset + n >= span.size else (index, offset + n)
            os.posix_fadvise(self._fd, span.offset + offset, n, os.POSIX_FADV_WILLNEED)
            self.bytes_read += n
            if mode == "warm":
                allowance -= n

    def _current(self, generation: int) -> bool:
        return self._generation == generation and not self._closed

    def _behind(self, window: int) -> bool:
        """Whether the cursor is less than ``window`` bytes ahead of the forward, with
        weights left to read."""
        return self._cursor[0] < len(self.spans) and self._ahead() < window

    def _ahead(self) -> int:
        """Bytes between the span the forward reads next and the cursor."""
        index, offset = self._cursor
        return self._starts[index] + offset - self._starts[self._forward_at]

    def close(self) -> None:
        if self._model is not None and self._model.layer_listener == self.layer_done:
            self._model.layer_listener = None
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._worker.join()
        os.close(self._fd)


def _first_span_of_each_layer(spans: list[TensorSpan]) -> dict[int | str, int]:
    """Layer index -> the index of its first span in forward order; "tail": the first span
    after the layers (the output norm and projection)."""
    firsts: dict[int | str, int] = {}
    for i, span in enumerate(spans):
        layer = layer_of(span.name)
        if layer is None:
            firsts.setdefault("tail", i)
        else:
            firsts.setdefault(layer, i)
    firsts.setdefault("tail", len(spans))
    return firsts
