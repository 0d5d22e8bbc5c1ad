"""`exporter recommend`: MIG layouts, workload placement and MPS advice from usage or a plan.

Pipeline (each step a module, each a pure function of the one before except the inputs):

    inputs (snapshot_input / prometheus_input / plan_file) -> demand.Demand
    planner.plan_model (MILP optimum) + baselines (homogeneous, greedy) + mps -> report.Recommendation
    outputs_* render a Recommendation as text, json, yaml, markdown, html or a mig-parted file.

See docs/recommend.md for the model behind the numbers.
"""
