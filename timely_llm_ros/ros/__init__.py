"""Thin rclpy layer: the server, executor and workload nodes, and the process bringup.

Node modules import rclpy and the generated interfaces; ``bringup`` needs only PyYAML (rclpy is optional,
for discovering that a node's action server is up).
"""
