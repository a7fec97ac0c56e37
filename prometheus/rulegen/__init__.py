"""Prometheus rules as code: `python -m bundle` writes prometheus/rules.yml and alerts.yml,
and with them grafana/dashboards/*.json and mixin/ (bundle/__main__.py, the one generator CLI).

config.py holds the selector and thresholds, recording.py the recording rules, alerts.py the alerts,
render.py the YAML. tests/prometheus/ checks that the committed files equal this output.
"""
