"""Names the recording rules define and the modules they list read too (hang.py, alerts.py): here, below all
of them, so no module imports back the one that imports it."""

from __future__ import annotations

# The `other` group folds each rank's unrelated groups together: its members are not one group.
NOT_OTHER = 'group!="other"'
RANK_INFO = "rank:trainmon_train_rank_info:max"
