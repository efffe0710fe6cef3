"""Local–remote protocols (paper 000): Minion, MinionS and the baselines they are measured
against, on the engine convention (``stream``, ``generate``; the config picks the protocol).
"""

from coinfer.engines.minions.baselines import DirectConfig, direct
from coinfer.engines.minions.engine import ProtocolConfig, generate, run_extras, stream
from coinfer.engines.minions.minion import MinionConfig, minion
from coinfer.engines.minions.minions import MinionsConfig, minions
from coinfer.engines.minions.protocol import ChatCall, CodeRun, Finished, Note, Run, drive, run_protocol
from coinfer.engines.minions.rag import RagConfig, rag

__all__ = [
    "ChatCall",
    "CodeRun",
    "DirectConfig",
    "Finished",
    "MinionConfig",
    "MinionsConfig",
    "Note",
    "ProtocolConfig",
    "RagConfig",
    "Run",
    "direct",
    "drive",
    "generate",
    "minion",
    "minions",
    "rag",
    "run_extras",
    "run_protocol",
    "stream",
]
