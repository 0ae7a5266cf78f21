# The probe of another checkout as a shared venv may name it (cli.tune_runner_probe_is_this_checkouts):
# an older layout without site/sitecustomize.py. `tune --runner` must not take it over its own.
