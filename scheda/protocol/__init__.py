"""The paper's protocol, a layer over training: its vocabulary (``jobs``: a job), its job kinds
(``kinds``: one class per kind says how its jobs are planned, selected, reported and drawn),
what each phase runs (``phases``), selection on validation (``selection``), running a
phase (``launch``) and what Slurm says of it (``slurm``), the seeds axis (``seeds``), the
report beside the paper's numbers (``report``), its figures (``figures``), the paper's
sensitivity diagnostic (``sensitivity``), the schemas (``config``), the plan's cost (``estimate``) and the
``scheda-reproduce`` command (``reproduce``). It talks to training only through run
directories (results.json, checkpoints, config.yaml), ``python -m scheda.cli -m`` and the
training side's public functions (``build_schedule``, ``load_run_model``, ...); nothing on the
training side imports it.
"""
