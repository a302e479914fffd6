"""A module other than the test's, to check guards on another module's globals."""
import torch

OFFSET = 1.5


def shifted(x):
    return torch.relu(x) + OFFSET
