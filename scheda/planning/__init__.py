"""What a run is, decided once before any data: its config typed (run_config), every rule between
its groups and the device (rules: each refusal, one line), and the plan built from them (plan: the
device, the step, the models). It reads every group's schema, so it sits above them all and below
the run that follows it (scheda.run)."""
