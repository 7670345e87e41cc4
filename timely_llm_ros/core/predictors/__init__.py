"""Predictors the paper policies use (output length, urgency, execution time); ROS- and torch-free where they can be.

Trained by ``python -m tools.train_predictors`` on data the project generates; the small artefacts
live in models/predictors/.
"""
