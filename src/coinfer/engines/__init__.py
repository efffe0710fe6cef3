"""One package per paper, each on the engine convention (``Config``, ``stream``, ``generate``),
built only from the layers below and never from each other; every engine is reached by
name through the registry::

    engine = coinfer.engines.get("llmcad")
    with engine.open({"target": target, "draft": draft}) as session:
        print(session.generate(Request(prompt=ids)).text)
"""

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.registry import GROUP, all_engines, get, names

__all__ = ["GROUP", "Engine", "Learned", "Request", "Session", "all_engines", "get", "names"]
