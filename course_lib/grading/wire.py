"""Plain data between the grader and a student's kernel: JSON, with
tensors as raw little-endian bytes in base64. Nothing in it can carry
code (no pickle), and :func:`decode` checks every field and size.

What travels: ``None``, ``bool``, ``int``, ``float``, ``str``, lists,
tuples, dicts with ``str`` keys, plain ``torch.Tensor`` objects and
numeric ``numpy`` arrays. Any
other object is described by its type's name only (``{"$other": name}``),
so the grader can say what came back without ever holding it. The
grader's cases may also name a function of ``course_lib`` (a feature map
passed to the student's code); only a kernel decodes those, with
``functions=True``.
"""

import base64
import importlib
import json
import math

import numpy
import torch

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8,
    "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
    "float16": torch.float16, "float32": torch.float32,
    "float64": torch.float64, "complex64": torch.complex64,
    "complex128": torch.complex128,
}
NAMES = {dtype: name for name, dtype in DTYPES.items()}
MAX_DEPTH = 12
MAX_ITEMS = 100_000  # values in one message
MAX_BYTES = 64 * 2**20  # tensor bytes in one message


class WireError(ValueError):
    """Data that does not follow this format, or is too large."""


class Other:
    """What the grader knows of a value it could not be sent: its type's
    name, and whether it was a ``torch.Tensor`` subclass."""

    def __init__(self, name, tensor_subclass=False):
        self.name, self.tensor_subclass = name, tensor_subclass

    def __repr__(self):
        return f"<a {self.name}>"


# ---------------------------------------------------------------- encode


def encode(value):
    """``value`` as JSON text (see the module's docstring)."""
    budget = {"items": 0, "bytes": 0}
    return json.dumps(_encode(value, 0, budget), separators=(",", ":"))


def _type_name(value):
    return getattr(type(value), "__name__", "object")


def _encode(value, depth, budget):
    budget["items"] += 1
    if depth > MAX_DEPTH or budget["items"] > MAX_ITEMS:
        raise WireError("the value is nested too deeply or is too large")
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"$float": repr(value)}
    if kind is list:
        return [_encode(v, depth + 1, budget) for v in value]
    if kind is tuple:
        return {"$tuple": [_encode(v, depth + 1, budget) for v in value]}
    if kind is dict:
        if not all(type(k) is str for k in value):
            return {"$other": "dict with keys that are not str"}
        return {"$dict": [[k, _encode(v, depth + 1, budget)]
                          for k, v in value.items()]}
    if kind is torch.Tensor:
        return _encode_tensor(value, budget)
    if kind is numpy.ndarray and value.dtype.kind in "biufc":
        tensor = torch.from_numpy(numpy.ascontiguousarray(value))
        return {"$ndarray": _encode_tensor(tensor, budget)["$tensor"]}
    if isinstance(value, torch.Tensor):
        return {"$other": _type_name(value), "tensor_subclass": True}
    if kind in (numpy.float64, numpy.float32, numpy.int64, numpy.int32,
                numpy.bool_):
        return _encode(value.item(), depth, budget)  # numpy's scalars
    function = _function_name(value)
    if function is not None:
        return function
    return {"$other": _type_name(value)}


def _encode_tensor(tensor, budget):
    t = tensor.detach()
    if t.layout is not torch.strided or t.dtype not in NAMES:
        return {"$other": f"{t.dtype} {t.layout} tensor"}
    t = t.cpu().contiguous()
    raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes() \
        if t.dtype is not torch.bool else t.numpy().tobytes()
    budget["bytes"] += len(raw)
    if budget["bytes"] > MAX_BYTES:
        raise WireError(f"more than {MAX_BYTES // 2**20} MB of tensors")
    return {"$tensor": [NAMES[t.dtype], list(t.shape),
                        base64.b64encode(raw).decode("ascii")]}


def _function_name(value):
    """``{"$function": ...}`` for a course_lib function, or a
    ``functools.partial`` of one with keyword arguments."""
    import functools

    keywords = {}
    if type(value) is functools.partial and not value.args:
        keywords, value = value.keywords, value.func
    module = getattr(value, "__module__", None) or ""
    name = getattr(value, "__qualname__", "")
    if (not module.startswith("course_lib.") or not callable(value)
            or "." in name or "<" in name):
        return None
    return {"$function": f"{module}:{name}",
            "keywords": _encode(dict(keywords), 0, {"items": 0, "bytes": 0})}


# ---------------------------------------------------------------- decode


def decode(text, *, functions=False):
    """The values of :func:`encode`'s ``text``; :class:`WireError` for
    anything else. ``functions``: resolve ``course_lib`` function names
    (a kernel reading the grader's cases; never the grader)."""
    if not isinstance(text, str) or len(text) > 2 * MAX_BYTES:
        raise WireError("expected JSON text of at most "
                        f"{2 * MAX_BYTES // 2**20} MB")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise WireError(f"not JSON: {error}") from None
    return _decode(data, 0, {"items": 0, "bytes": 0}, functions)


def _decode(data, depth, budget, functions):
    budget["items"] += 1
    if depth > MAX_DEPTH or budget["items"] > MAX_ITEMS:
        raise WireError("the value is nested too deeply or is too large")
    if data is None or type(data) in (bool, int, str, float):
        return data
    if type(data) is list:
        return [_decode(v, depth + 1, budget, functions) for v in data]
    if type(data) is not dict or len(data) not in (1, 2):
        raise WireError("expected a value of the wire format")
    if "$tensor" in data and len(data) == 1:
        return _decode_tensor(data["$tensor"], budget)
    if "$ndarray" in data and len(data) == 1:
        return _decode_tensor(data["$ndarray"], budget).numpy()
    if "$tuple" in data and len(data) == 1 and type(data["$tuple"]) is list:
        return tuple(_decode(v, depth + 1, budget, functions)
                     for v in data["$tuple"])
    if "$dict" in data and len(data) == 1 and type(data["$dict"]) is list:
        out = {}
        for pair in data["$dict"]:
            if (type(pair) is not list or len(pair) != 2
                    or type(pair[0]) is not str):
                raise WireError("expected [key, value] pairs in a dict")
            out[pair[0]] = _decode(pair[1], depth + 1, budget, functions)
        return out
    if "$float" in data and len(data) == 1:
        if data["$float"] not in ("nan", "inf", "-inf"):
            raise WireError("expected nan, inf or -inf")
        return float(data["$float"])
    if "$other" in data and type(data["$other"]) is str:
        subclass = data.get("tensor_subclass", False)
        if len(data) == 2 and "tensor_subclass" not in data:
            raise WireError("unexpected field beside $other")
        return Other(data["$other"][:200], subclass is True)
    if "$function" in data:
        if functions:
            return _resolve(data, depth, budget)
        return Other("function")
    raise WireError("expected a value of the wire format")


def _decode_tensor(fields, budget):
    if (type(fields) is not list or len(fields) != 3
            or fields[0] not in DTYPES or type(fields[1]) is not list
            or type(fields[2]) is not str
            or not all(type(n) is int and 0 <= n for n in fields[1])):
        raise WireError("expected [dtype, shape, base64 bytes]")
    dtype = DTYPES[fields[0]]
    count = math.prod(fields[1])
    size = count * torch.empty((), dtype=dtype).element_size()
    budget["bytes"] += size
    if budget["bytes"] > MAX_BYTES:
        raise WireError(f"more than {MAX_BYTES // 2**20} MB of tensors")
    try:
        raw = base64.b64decode(fields[2], validate=True)
    except ValueError:
        raise WireError("tensor bytes are not base64") from None
    if len(raw) != size:
        raise WireError(f"expected {size} bytes for a {fields[0]} tensor "
                        f"of shape {tuple(fields[1])}, got {len(raw)}")
    kind = numpy.dtype(bool) if dtype is torch.bool else numpy.dtype(
        str(dtype).removeprefix("torch.")).newbyteorder("<")
    array = numpy.frombuffer(raw, dtype=kind).astype(kind.newbyteorder(
        "=")).reshape(fields[1])
    return torch.from_numpy(array.copy())


def _resolve(data, depth, budget):
    module_name, _, name = str(data["$function"]).partition(":")
    if not module_name.startswith("course_lib.") or not name.isidentifier():
        raise WireError(f"not a course_lib function: {data['$function']}")
    function = getattr(importlib.import_module(module_name), name)
    keywords = _decode(data.get("keywords") or {"$dict": []}, depth + 1,
                       budget, True)
    if keywords:
        import functools

        return functools.partial(function, **keywords)
    return function
