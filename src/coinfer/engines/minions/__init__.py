"""Local–remote protocols (paper 000): Minion, MinionS and the baselines they are measured against."""

from coinfer.engines.minions.baselines import direct
from coinfer.engines.minions.minion import MinionConfig, minion
from coinfer.engines.minions.minions import MinionsConfig, minions
from coinfer.engines.minions.protocol import ChatCall, CodeRun, Finished, Note, Run, drive
from coinfer.engines.minions.rag import rag

__all__ = [
    "ChatCall",
    "CodeRun",
    "Finished",
    "MinionConfig",
    "MinionsConfig",
    "Note",
    "Run",
    "direct",
    "drive",
    "minion",
    "minions",
    "rag",
]
