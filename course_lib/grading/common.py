"""Inputs and property checks shared by the chapters' exercise specs."""

import torch

from course_lib import attention as ref_attention
from course_lib.grading import _trusted as T
from course_lib.grading.engine import Case, GradingError, as_array

F32, F64 = torch.float32, torch.float64


def randn(*shape, seed, dtype=F32, scale=1.0):
    """Seeded normal tensor: the same numbers on every run and machine."""
    g = T.torch_generator().manual_seed(seed)
    return T.torch_randn(*shape, generator=g, dtype=F64).to(dtype) * scale


def random_mask(*shape, seed, p=0.6):
    """Seeded bool mask in which every query keeps at least one key."""
    g = T.torch_generator().manual_seed(seed)
    mask = T.torch_rand(*shape, generator=g) < p
    mask[..., 0] = True
    return mask


def token_module_cases(specs, seed):
    """Cases for a module called as ``module(X)`` or ``module(X, mask)``.

    Each spec is ``(label, init, shape, dtype, mask)``: ``init`` holds the
    constructor's keywords (with ``d_model``), ``shape`` the leading
    dimensions of ``X`` ending with ``N``, and ``mask`` is ``None``,
    ``"causal"`` or ``"random"``.
    """
    cases = []
    for i, (label, init, shape, dtype, mask) in enumerate(specs):
        X = randn(*shape, init["d_model"], seed=seed + i, dtype=dtype)
        N = shape[-1]
        if mask == "causal":
            args = (X, ref_attention.causal_mask(N))
        elif mask == "random":
            args = (X, random_mask(shape[0], N, N, seed=seed + 50 + i))
        else:
            args = (X,)
        cases.append(Case(label, args, init=init))
    return cases


def rows_sum_to_one(index, name="weights"):
    """Property: each row of output ``index`` sums to 1 (where unmasked)."""

    def prop(case, outputs):
        A = as_array(outputs[index], f"your {name}")
        if A.ndim < 1 or A.dtype == bool:
            return None
        if (A < -1e-6).any():
            return f"your {name} has negative entries: {A.min():.3g}."
        sums = A.sum(axis=-1)
        bad = abs(sums - 1.0) > 1e-4
        if bad.any():
            return (
                f"rows of your {name} should sum to 1, but "
                f"{int(bad.sum())} of {sums.size} rows sum to values such "
                f"as {float(sums[bad].flat[0]):.4g}."
            )
        return None

    return prop


def masked_weights_are_zero(index, mask_position):
    """Property: weights are exactly 0 where the case's mask is False."""

    def prop(case, outputs):
        if T.len_(case.args) <= mask_position:
            return None
        mask = case.args[mask_position]
        if mask is None:
            return None
        A = as_array(outputs[index], "your weights")
        allowed = as_array(mask, "mask")
        try:
            import numpy

            allowed = numpy.broadcast_to(allowed, A.shape)
        except ValueError:
            return None
        leaked = (A != 0) & ~allowed
        if leaked.any():
            count = int(leaked.sum())
            return (
                f"{count} masked weights are not zero (largest "
                f"{float(abs(A[leaked]).max()):.3g}). A query must give "
                "weight exactly 0 to a key its mask forbids: fill the "
                "scores with -inf (or a very negative number) before the "
                "softmax."
            )
        return None

    return prop


def require_linear(module, name, d_in, d_out, bias):
    """Check that ``module.<name>`` is an ``nn.Linear(d_in, d_out)``."""
    layer = T.getattr_(module, name, None)
    if not T.isinstance_(layer, T.Linear):
        raise GradingError(
            f"expected an attribute {name} = nn.Linear({d_in}, {d_out}), "
            f"got {T.type_(layer).__name__}"
        )
    if (layer.in_features, layer.out_features) != (d_in, d_out):
        raise GradingError(
            f"{name} should map {d_in} -> {d_out} features, but it is "
            f"nn.Linear({layer.in_features}, {layer.out_features})"
        )
    if (layer.bias is not None) != bias:
        raise GradingError(
            f"{name} should {'have' if bias else 'not have'} a bias "
            f"(bias={bias})"
        )


def seeded_weights(layers, seed, dtype):
    """Seeded ``(weight, bias)`` for each ``(name, d_in, d_out, bias)``."""
    weights = {}
    for i, (name, d_in, d_out, bias) in enumerate(layers):
        w = randn(d_out, d_in, seed=seed + 2 * i, dtype=dtype,
                  scale=d_in ** -0.5)
        b = randn(d_out, seed=seed + 2 * i + 1, dtype=dtype, scale=0.1)
        weights[name] = (w, b if bias else None)
    return weights


def load_weights(module, weights, dtype):
    """Put seeded weights into the Linear layers of ``module``."""
    module.to(dtype)
    with torch.no_grad():
        for name, (w, b) in weights.items():
            layer = T.getattr_(module, name)
            layer.weight.copy_(w)
            if b is not None:
                layer.bias.copy_(b)
    module.eval()
    return module


def build(student_cls, case, layers, reference_cls, what):
    """Instantiate the student's class and the reference with one set of
    seeded weights; return both instances."""
    try:
        student = student_cls(**case.init)
    except NotImplementedError:
        raise GradingError(
            f"{what} is not implemented yet (it raised "
            "NotImplementedError): replace the `raise` line with your code."
        ) from None
    except Exception as error:
        args = ", ".join(f"{k}={v!r}" for k, v in case.init.items())
        raise GradingError(
            f"{what}({args}) raised {T.type_(error).__name__}: {error}"
        ) from None
    if not T.isinstance_(student, T.Module):
        raise GradingError(f"{what} should be an nn.Module subclass")
    for name, d_in, d_out, bias in layers:
        require_linear(student, name, d_in, d_out, bias)
    dtype = T.tensor_dtype(case.args[0])
    weights = seeded_weights(layers, seed=1234, dtype=dtype)
    reference = load_weights(reference_cls(**case.init), weights, dtype)
    student = load_weights(student, weights, dtype)
    return student, reference


def prepare_module(reference_cls, layers, what):
    """A ``prepare`` for class exercises: the student's instance and the
    reference share seeded weights, and each misconception runs on the
    reference's weights. ``layers(init)`` lists the Linear layers."""

    def prepare(student_cls, case, exercise):
        student, reference = build(student_cls, case, layers(case.init),
                                   reference_cls, what)
        wrong = [lambda *a, f=m.fn: f(reference, *a)
                 for m in exercise.misconceptions]
        return student, reference, wrong

    return prepare
