"""Driving runs: one replay of a trace over a lab (``driver``), set against the time model's prediction of
it (``prediction``), at the time scale its trace needs on this machine (``autoscale``, from a calibration
of the machine, ``calibrate``), confirmed at a second scale or searched over scales. It uses the pieces of
``orchestrator.experiment`` (modes, session, records, the fidelity verdict) and the time model of
``orchestrator.model``, which itself reads the experiment's records and modes: so the driver sits above
both."""
