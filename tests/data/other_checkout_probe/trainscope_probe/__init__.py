# The probe of another checkout as a shared venv may name it (Job.TheDefaultProbeIsThisCheckoutsNotTheOneTheVenvImports):
# an older layout without site/sitecustomize.py. `tune --runner` must not take it over its own.
