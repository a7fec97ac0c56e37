"""`VERL_USE_EXTERNAL_MODULES=trainmon.integrations.verl_auto`: verl imports this in each of its processes.

Importing it runs `trainmon.integrations.verl.install()` (job id from `TRAINMON_JOB_ID` and the rest
of the hook's environment); nothing else should import it.
"""

from trainmon.integrations.verl import install

INTEGRATION = install()
