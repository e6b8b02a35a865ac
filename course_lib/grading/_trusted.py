"""Primitives the checks rely on, captured when the grader is imported.

The grader runs in the student's kernel, where a cell can rebind
``torch.allclose``, numpy's functions or ``builtins.isinstance``. The checks
use only the objects captured here, at import time (the notebook's setup
cell, or the kernel's start under the autograder), before any student code.
Methods of C types such as ``numpy.ndarray`` and ``torch._C.TensorBase``
cannot be reassigned at all, so arithmetic on arrays is safe too.
"""

import builtins
import hashlib
import hmac
import json
import math
import sys
import warnings

import numpy
import torch

Tensor = torch.Tensor
TensorBase = torch._C.TensorBase
Module = torch.nn.Module
Linear = torch.nn.Linear
ndarray = numpy.ndarray

type_ = builtins.type
isinstance_ = builtins.isinstance
getattr_ = builtins.getattr
hasattr_ = builtins.hasattr
callable_ = builtins.callable
len_ = builtins.len
repr_ = builtins.repr
tuple_ = builtins.tuple
float_ = builtins.float
int_ = builtins.int
dict_ = builtins.dict

tensor_detach = TensorBase.detach
tensor_to = TensorBase.to
tensor_clone = TensorBase.clone
tensor_numpy = TensorBase.numpy
tensor_dtype = TensorBase.dtype.__get__
tensor_shape = TensorBase.shape.__get__
tensor_requires_grad = TensorBase.requires_grad.__get__

np_array = numpy.array
np_abs = numpy.abs
np_isfinite = numpy.isfinite
np_isnan = numpy.isnan
np_all = numpy.all
np_float64 = numpy.float64
np_number = numpy.number
np_concatenate = numpy.concatenate

torch_float64 = torch.float64
torch_float32 = torch.float32
torch_bool = torch.bool
torch_generator = torch.Generator
torch_randn = torch.randn
torch_rand = torch.rand
torch_no_grad = torch.no_grad

sys_setprofile = sys.setprofile
sys_getprofile = sys.getprofile
catch_warnings = warnings.catch_warnings
simplefilter = warnings.simplefilter

hmac_new = hmac.new
hmac_compare = hmac.compare_digest
sha256 = hashlib.sha256
json_dumps = json.dumps
isclose = math.isclose
