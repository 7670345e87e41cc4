"""Adapting a model to a skill set: a training corpus generated from the skill set's task patterns and an object
vocabulary (vocabulary.py, patterns.py, corpus.py), a LoRA trainer (train.py, the ``timely_adapt`` command) and the
adapter's files, checked against the model that loads them (adapter.py).

The corpus side is torch-free; train.py and adapter.apply_adapter import torch and peft when called.
"""
