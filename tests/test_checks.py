"""The shared validators of attention/_checks.py, where a public function does not reach them."""

from __future__ import annotations

import ast
import re

import pytest
import torch

from attention._checks import (
    check_cap,
    check_companion,
    check_key_padding_mask,
    check_real,
    check_shape,
    check_sinks,
)
from tests.conftest import ROOT

B, S = 2, 7


def test_key_padding_mask_becomes_a_keep_mask_over_heads_and_queries():
    padding = torch.tensor([[False] * 7, [False] * 4 + [True] * 3])  # True marks padding
    keep = check_key_padding_mask(padding, B, S, torch.float32)
    assert keep.shape == (B, 1, 1, S)
    assert torch.equal(keep[:, 0, 0], ~padding)
    bias = torch.randn(B, S)
    assert torch.equal(check_key_padding_mask(bias, B, S, torch.float32)[:, 0, 0], bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_key_padding_mask_without_allow_float_takes_bool_only(dtype):
    # Sequence-parallel attention calls it so: its kernels read the padding as a
    # keep-mask, so a float bias (even of the query's dtype) is refused, not misread.
    message = (
        rf"key_padding_mask must be bool \(True marks padding\): only a bool mask .*; got {dtype}$"
    )
    with pytest.raises(TypeError, match=message):
        check_key_padding_mask(
            torch.zeros(B, S, dtype=dtype), B, S, torch.float32, allow_float=False
        )
    padding = torch.zeros(B, S, dtype=torch.bool)
    keep = check_key_padding_mask(padding, B, S, torch.float32, allow_float=False)
    assert keep.shape == (B, 1, 1, S) and keep.dtype == torch.bool and bool(keep.all())
    with pytest.raises(ValueError, match=r"must have shape \(B, S\) = \(2, 7\); got \(7, 2\)"):
        check_key_padding_mask(torch.zeros(S, B), B, S, torch.float32, allow_float=False)


# Modules whose checks cannot live in attention/_checks.py, and why.
OWN_CHECKS = {
    # NumPy only, importing no torch (it is the reference the torch code is tested
    # against); attention/_checks.py imports torch.
    "attention/numpy_reference.py",
    # The ranks' agreement on a collective call, after each rank has run
    # attention._checks.check_sequence_parallel_call on its own arguments.
    "attention/distributed/_calls.py",
    # Which attention names Transformers would not run as registered: a rule of
    # Transformers' dispatch (read from its source, tested against it), not of the
    # package's arguments; the module imports Transformers only when it is called.
    "attention/integrations/huggingface.py",
}


def check_functions(path: str, source: str) -> list[str]:
    """``path:line name`` of each function of ``source`` named like a check."""
    return [
        f"{path}:{node.lineno} {node.name}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and re.match(r"_?check_", node.name)
    ]


def test_argument_checks_have_one_home() -> None:
    # softcap.py's _check_cap and sinks.py's _check_sinks had come back beside
    # _checks.py, and a second home drifts: _check_cap refused the NumPy float32
    # that check_scale takes.
    found = []
    for module in sorted((ROOT / "attention").rglob("*.py")):
        path = module.relative_to(ROOT).as_posix()
        if path != "attention/_checks.py" and path not in OWN_CHECKS:
            found += check_functions(path, module.read_text(encoding="utf-8"))
    assert not found, f"argument checks outside attention/_checks.py: {found}"
    assert check_functions("x.py", "def _check_cap(cap):\n    pass\n") == ["x.py:1 _check_cap"]


def test_cap_and_sinks_checks() -> None:
    import numpy as np

    assert check_cap(np.float32(2.5)) == 2.5 and check_cap(3) == 3.0
    for cap, error in [(True, TypeError), ("5", TypeError), (0, ValueError), (np.inf, ValueError)]:
        with pytest.raises(error, match="cap must be"):
            check_cap(cap)
    query = torch.zeros(2, 4, 5, 6)  # (B, H, L, D)
    sinks = torch.zeros(4)
    assert check_sinks(sinks, query) is sinks
    with pytest.raises(ValueError, match=r"sinks must have shape \(4,\).*got \(2, 4\)"):
        check_sinks(torch.zeros(2, 4), query)
    with pytest.raises(ValueError, match=r"query must be \(\.\.\., H, L, D\).*got \(5, 6\)"):
        check_sinks(sinks, torch.zeros(5, 6))


def test_companion_shape_and_real_checks() -> None:
    import numpy as np

    # check_companion: what linear_decay, state_space and delta_rule each checked alone.
    half = torch.zeros(3, dtype=torch.bfloat16)
    check_companion("decay", torch.zeros(3), "the query", half)  # float32 beside bfloat16
    check_companion("decay", half, "the query", half)
    message = r"A must have x's dtype torch.bfloat16 or torch.float32; got torch.float64$"
    with pytest.raises(TypeError, match=message):
        check_companion("A", half.double(), "x", half)
    with pytest.raises(TypeError, match=r"x's dtype torch.float32; got torch.float16$"):
        check_companion("A", half.half(), "x", half.float())
    with pytest.raises(ValueError, match=r"beta must be on the query's device cpu; got meta"):
        check_companion("beta", torch.zeros(3, device="meta"), "the query", half.float())
    assert check_shape("dt", torch.zeros(2, 3), (2, 3), "(B, L)").shape == (2, 3)
    with pytest.raises(ValueError, match=r"dt must have shape \(B, L\) = \(2, 3\); got \(3, 2\)$"):
        check_shape("dt", torch.zeros(3, 2), (2, 3), "(B, L)")
    assert check_real("lambda_init", np.float32(0.5)) == 0.5
    for value, error in [(True, TypeError), ("1", TypeError), (float("nan"), ValueError)]:
        with pytest.raises(error, match="lambda_init must be"):
            check_real("lambda_init", value)
