"""Jupiter (paper 004): one model served by several edge devices as a planned pipeline.

``EdgeCluster`` (rank 0) profiles the devices, plans their layers (Eq. 1) and has each
load only its range; ``stream`` / ``generate`` serve a request, the prompt read in planned
sub-sequences (Eq. 2-4, intra-sequence pipelined prefill). ``run_worker`` is every other
device. ``start_local_pipeline`` starts a whole pipeline on this host from Python.
"""

from coinfer.engines.jupiter.cluster import EdgeCluster, memory_split
from coinfer.engines.jupiter.engine import JupiterConfig, generate, stream
from coinfer.engines.jupiter.local import LocalPipeline, join_pipeline, start_local_pipeline
from coinfer.engines.jupiter.planner import LayerPlan, SequencePlan, plan_layers, plan_sequence
from coinfer.engines.jupiter.worker import run_worker

__all__ = [
    "EdgeCluster",
    "JupiterConfig",
    "LayerPlan",
    "LocalPipeline",
    "SequencePlan",
    "generate",
    "join_pipeline",
    "memory_split",
    "plan_layers",
    "plan_sequence",
    "run_worker",
    "start_local_pipeline",
    "stream",
]
