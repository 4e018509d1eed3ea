"""What a model gives to be scored, and the files it comes in: `layouts.py` reads a run of predictions in any of
their layouts as one model, `trajectory.py` owns the trajectory format that `reproduce serve` writes (an agent's
run, which score reads as predictions). Below the commands and serve: nothing here imports them."""
