"""Shared fixtures: every test is seeded and runs on the CPU."""

import pytest
import torch

DTYPES = [torch.float32, torch.float64]
# Tolerances for comparing two float implementations of the same maths.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6),
       torch.float64: dict(rtol=1e-10, atol=1e-12)}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.fixture
def tol(dtype):
    return TOL[dtype]
