"""llama.cpp's calls back into Python: its log lines, sent to the ``coinfer.llama_cpp``
logger, and its per-node eval callback, reporting each layer of a forward as it finishes."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["layer_progress_callback", "route_logs"]

log = logging.getLogger("coinfer.models.llamacpp")

_LOG_CALLBACK: Any = None
_LLAMA_LOG = logging.getLogger("coinfer.llama_cpp")
# ggml's levels (debug 1, info 2, warn 3, error 4) in Python's: its warnings, mostly about
# settings chosen on purpose (a context shorter than training), are INFO, shown on request
_LEVELS = {4: logging.ERROR, 3: logging.INFO, 2: logging.DEBUG, 1: logging.DEBUG}


def route_logs(llama_cpp: Any) -> None:
    """llama.cpp logs to stderr by default; send its lines to the ``coinfer.llama_cpp``
    logger instead (llama.cpp's own printing with COINFER_LLAMA_LOG set)."""
    global _LOG_CALLBACK
    if _LOG_CALLBACK is not None or os.environ.get("COINFER_LLAMA_LOG"):
        return

    def forward(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        try:
            python_level = _LEVELS.get(level, logging.DEBUG)
            if _LLAMA_LOG.isEnabledFor(python_level):
                _LLAMA_LOG.log(python_level, "%s", text.decode("utf-8", "replace").rstrip())
        except Exception:  # noqa: BLE001, S110 - a log line must never raise into llama.cpp (C)
            pass

    _LOG_CALLBACK = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def layer_progress_callback(lc: Any, model: Callable[[], Any]) -> Any:
    """llama.cpp's eval callback, reporting each layer as the forward finishes it: asked
    about every node of the graph before it runs, it wants to see only the layer outputs
    (``l_out-N``), and only while the model has a ``layer_listener``; llama.cpp then
    computes the graph up to each such node, and calls back after it. ``model``: a weak
    reference to the model (None once it is gone)."""
    # ggml's own accessor, found through the llama library loaded (and so its ggml, also
    # under LLAMA_CPP_LIB_PATH)
    get_name = lc.llama_cpp._lib.ggml_get_name
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.c_void_p]

    @lc.ggml_backend_sched_eval_callback
    def on_node(tensor: int, ask: bool, _user: int) -> bool:
        m = model()
        listener = None if m is None else m.layer_listener
        if listener is None:
            return not ask  # wants nothing; once computed, go on
        name = get_name(tensor) or b""
        if ask:
            return name.startswith(b"l_out-")
        try:  # an exception leaving a ctypes callback would stop the forward half done
            listener(int(name[6:]))
        except Exception:
            log.exception("the layer listener of %s failed", m.name)
        return True

    return on_node
