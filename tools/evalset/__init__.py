"""The plan-quality evaluation set's generator (make_evalset) and its word and phrasing tables: drone.py and arm.py
for the dev and test splits, heldout_drone.py and heldout_arm.py for the heldout split."""
