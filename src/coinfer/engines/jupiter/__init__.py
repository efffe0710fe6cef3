"""Jupiter (paper 004): one model served by several edge devices as a planned pipeline.

So far: the parallelism planner (``planner``). The workers, the pipelined prefill and
decoding, and ``coinfer edge`` follow (issue 17).
"""

from coinfer.engines.jupiter.planner import LayerPlan, SequencePlan, plan_layers, plan_sequence

__all__ = ["LayerPlan", "SequencePlan", "plan_layers", "plan_sequence"]
