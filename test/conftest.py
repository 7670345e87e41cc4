"""Test session setup: each session gets its own ROS domain on loopback, logs under build/."""
import os
import random
from pathlib import Path

os.environ.setdefault("ROS_DOMAIN_ID", str(random.Random(os.getpid()).randint(1, 100)))
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_LOG_DIR", str(Path(__file__).resolve().parent.parent / "build" / "ros_log"))
