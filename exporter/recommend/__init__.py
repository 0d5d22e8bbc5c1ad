"""`exporter recommend`: MIG layouts, workload placement and MPS advice from usage or a plan.

Pipeline (each step a module, each a pure function of the one before except the inputs):

    inputs (snapshot_input / prometheus_input -> observed, or plan_file) -> demand.Demand
    report.recommend: per GPU model planner.plan_mig (exact MILP over patterns.py), baselines
    (homogeneous, greedy), mps / mps_pack (MPS advice), fleet_map -> result.Recommendation
    outputs_* render a Recommendation as text, json, yaml, markdown, html (svg) or mig-parted;
    command.py is the CLI (add_arguments / run).

See docs/recommend.md for the model behind the numbers.
"""
