"""One package per paper, each on the engine convention (``Config``, ``stream``, ``generate``),
built only from the layers below and never from each other."""
