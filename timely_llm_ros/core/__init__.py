"""ROS-free, torch-free scheduling core of timely_llm_ros."""
