"""Grafana dashboards as code (grafana-foundation-sdk, Grafana 11.6 line).

`python -m bundle` (the one generator CLI) writes grafana/dashboards/*.json. config.py
holds what users change, panels.py the panel helpers (every panel gets a unit, a description and the
datasource variable), node.py, job.py and fleet.py one dashboard each. tests/grafana/ checks the
committed JSON equals this output.
"""
