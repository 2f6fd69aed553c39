"""What tests/interop/model_files.cpp saves: a model's inputs and outputs as numbered .npy files."""
import os

import numpy as np


def arrays(d, prefix):
    """dir/<prefix>0.npy, <prefix>1.npy, ... as a list, as many as there are."""
    out, k = [], 0
    while os.path.exists(os.path.join(d, f"{prefix}{k}.npy")):
        out.append(np.load(os.path.join(d, f"{prefix}{k}.npy")))
        k += 1
    return out
