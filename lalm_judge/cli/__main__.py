"""`python -m lalm_judge.cli ...`: the same commands as `lalm-judge`, for launchers that start a module
(`accelerate launch -m lalm_judge.cli pairwise train ...`, `torchrun -m ...`)."""

import sys

from lalm_judge.cli import main

sys.exit(main())
