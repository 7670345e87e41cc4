"""The embedded default planner: corpus generator, tokenizer, trainer and plan-validity evaluation.

Only ``corpus`` is torch-free; ``tokenizer``, ``train`` and ``evaluate`` need the model stack.
"""
