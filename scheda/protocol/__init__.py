"""The paper's protocol, a layer over training: the stages of a table (``stages``), the
report beside the paper's numbers (``report``), the figures and feature analyses
(``analysis``), their schemas (``config``) and the ``scheda-reproduce`` command
(``reproduce``). It talks to training only through run directories (results.json,
checkpoints, config.yaml), ``python -m scheda.train -m`` and the training side's public
functions (``build_schedule``, ``load_run_model``, ...); nothing on the training side imports it.
"""
