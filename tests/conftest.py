import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import beartype  # noqa: E402,F401  (must be imported before nnsight, see RECIPES.md)
import torch  # noqa: E402

torch.set_num_threads(1)
