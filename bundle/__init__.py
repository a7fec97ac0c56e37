"""The monitoring bundle: what the rule generator (prometheus/rulegen) and the dashboard generator
(grafana/dashgen) share, below both (`config`, `panels`), and what composes them, above both (`mixin`,
`python -m bundle`). Neither generator imports the other.
"""
