"""What a model gives to be scored, and the files it comes in: `layouts.py` reads a run of predictions in any of
their layouts as one model, `trajectory.py` owns the trajectory format that `reproduce serve` writes (an agent's
run, which score reads as predictions), `inspect_log.py` what is read of an Inspect log (a run per epoch; it
imports inspect_ai only when a log is read). Below the commands and serve: nothing here imports them."""
