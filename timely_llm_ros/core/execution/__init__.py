"""Execution tracking (ROS-free): the planner's record of each robot's plans and segments (tracker.py, plan.py) and
the robot's own rules for what it runs next (robot_queue.py), shared by the executor base node and the simulator."""
from timely_llm_ros.core.execution.plan import PlanExecution, SegmentStatus, TrackedSegment
from timely_llm_ros.core.execution.robot_queue import PLAN_RULES, Arrival, Ended, Refusal, RobotQueue
from timely_llm_ros.core.execution.tracker import ExecutionTracker, PlanPreempted, SegmentExpired

__all__ = ["PLAN_RULES", "Arrival", "Ended", "ExecutionTracker", "PlanExecution", "PlanPreempted", "Refusal",
           "RobotQueue", "SegmentExpired", "SegmentStatus", "TrackedSegment"]
