"""The scale model (docs/scale.md): what a replay would count, computed from the lab plan and aidcnet's own
codecs, BIFT construction and forwarding instead of measured. ``exact`` runs on a lab plan (every mode the
model knows, held equal to replays by tests/e2e/test_model_crossval.py); ``clos`` is the vectorised engine
for generated Clos fabrics up to 64k GPUs, held equal to ``exact`` on small ones."""
