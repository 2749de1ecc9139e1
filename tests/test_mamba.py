"""The Mamba block: parallel scan == sequential scan, causality, padding, initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tcl_core.mamba import (
    MambaBlock,
    MambaConfig,
    ResidualMamba,
    selective_scan_inference,
    selective_scan_parallel,
    selective_scan_sequential,
)

torch.set_num_threads(1)
SMALL = MambaConfig(d_model=8, d_state=4, d_conv=3, expand=2)


def _scan_inputs(length: int, *, b: int = 2, e: int = 6, n: int = 4, delta_scale: float = 1.0):
    u = torch.randn(b, length, e)  # (b, l, e)
    delta = F.softplus(torch.randn(b, length, e)) * delta_scale  # (b, l, e)
    A = -torch.exp(torch.randn(e, n))  # (e, n)
    B = torch.randn(b, length, n)  # (b, l, n)
    C = torch.randn(b, length, n)  # (b, l, n)
    D = torch.randn(e)  # (e,)
    return u, delta, A, B, C, D


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 33])
def test_parallel_scan_matches_sequential(length):
    torch.manual_seed(length)
    inputs = _scan_inputs(length)
    expected = selective_scan_sequential(*inputs)
    got = selective_scan_parallel(*inputs)
    assert got.shape == (2, length, 6)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("length", [1, 2, 7, 33])
def test_inference_scan_matches_sequential_and_leaves_its_inputs_alone(length):
    torch.manual_seed(10 + length)
    inputs = _scan_inputs(length)
    copies = [t.clone() for t in inputs]
    got = selective_scan_inference(*inputs)  # in place on its own buffers only
    torch.testing.assert_close(got, selective_scan_sequential(*inputs), atol=1e-5, rtol=1e-5)
    for before, after in zip(copies, inputs):
        assert torch.equal(before, after)


def test_block_scores_the_same_with_autograd_off_as_on():
    """Without autograd the block takes the in-place scan; it must agree with the training path."""
    torch.manual_seed(11)
    block = MambaBlock(SMALL, sequential=True)
    x = torch.randn(4, 9, SMALL.d_model)  # (b, l, d)
    mask = torch.arange(9) < torch.tensor([[9], [5], [1], [9]])  # (b, l)
    with_grad = block(x, mask)
    assert with_grad.requires_grad  # the reference loop, differentiable
    with torch.inference_mode():
        without = block(x, mask)
    torch.testing.assert_close(without, with_grad.detach(), atol=1e-5, rtol=1e-5)


def test_parallel_scan_gradients_match_sequential():
    torch.manual_seed(0)
    leaves = [t.requires_grad_() for t in _scan_inputs(11)]
    grads = []
    for scan in (selective_scan_sequential, selective_scan_parallel):
        out = scan(*leaves)
        weights = torch.linspace(-1, 1, out.numel()).view_as(out)  # a generic upstream gradient
        grads.append(torch.autograd.grad((out * weights).sum(), leaves))
    for g_seq, g_par in zip(*grads):
        torch.testing.assert_close(g_par, g_seq, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("delta_scale", [1e-4, 1e3])
def test_parallel_scan_stable_for_extreme_steps(delta_scale):
    """Δ A of order -1e3 over 200 steps: an exp(-cumsum) formulation would overflow to inf here."""
    torch.manual_seed(1)
    inputs = _scan_inputs(200, delta_scale=delta_scale)
    got = selective_scan_parallel(*inputs)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, selective_scan_sequential(*inputs), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("length", [1, 6, 17])
def test_block_parallel_matches_sequential(length):
    torch.manual_seed(2)
    block = MambaBlock(SMALL)
    x = torch.randn(3, length, SMALL.d_model)  # (b, l, d)
    mask = torch.arange(length) < torch.tensor([[length], [max(1, length - 2)], [1]])  # (b, l)
    for m in (None, mask):
        torch.testing.assert_close(block(x, m), block(x, m, sequential=True), atol=1e-5, rtol=1e-5)
    assert MambaBlock(SMALL, sequential=True).sequential  # the constructor flag selects the loop


@pytest.mark.parametrize("sequential", [False, True])
def test_block_is_causal(sequential):
    torch.manual_seed(3)
    layer = ResidualMamba(SMALL, sequential=sequential)
    x = torch.randn(1, 10, SMALL.d_model)  # (b, l, d)
    changed = x.clone()
    changed[:, 6] += 5.0
    before, after = layer(x), layer(changed)  # (b, l, d) each
    torch.testing.assert_close(after[:, :6], before[:, :6], atol=1e-6, rtol=0)
    moved = (after[:, 6:] - before[:, 6:]).abs().amax(dim=-1)  # (1, 4)
    # Position 6 moves with its input; later ones through conv and state, weakly at init (small Δ
    # gives small B̄ u), but well above the float noise that the unchanged prefix shows (0).
    assert moved[0, 0] > 1.0 and moved.min() > 1e-6


@pytest.mark.parametrize("layer_type", [MambaBlock, ResidualMamba])
def test_padding_does_not_leak_into_valid_positions(layer_type):
    """Garbage (NaN, huge values) after the end changes neither valid outputs nor any gradient."""
    torch.manual_seed(4)
    layer = layer_type(SMALL)
    valid = torch.randn(1, 5, SMALL.d_model)  # (1, 5, d)
    garbage = torch.full((1, 4, SMALL.d_model), float("nan"))
    garbage[..., ::2] = 1e6
    padded = torch.cat([valid, garbage], dim=1)  # (1, 9, d)
    mask = torch.arange(9).unsqueeze(0) < 5  # (1, 9)
    out = layer(padded, mask)  # (1, 9, d)
    reference = layer(valid)  # (1, 5, d)
    torch.testing.assert_close(out[:, :5], reference, atol=1e-6, rtol=1e-6)
    assert torch.equal(out[:, 5:], torch.zeros_like(out[:, 5:]))
    # NaN must not reach the weights through the backward pass either (it would poison training).
    weights = list(layer.parameters())
    grads = torch.autograd.grad(out.sum(), weights)
    for got, expected in zip(grads, torch.autograd.grad(reference.sum(), weights)):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_config_defaults_and_initialisation():
    assert MambaConfig().dt_rank == 4 and MambaConfig(d_model=20).dt_rank == 2
    assert MambaConfig(dt_rank=7).dt_rank == 7 and MambaConfig().d_inner == 128
    with pytest.raises(ValueError):
        MambaConfig(dt_min=0.2, dt_max=0.1)
    torch.manual_seed(5)
    config = MambaConfig()
    block = MambaBlock(config)
    expected = torch.log(torch.arange(1, config.d_state + 1, dtype=torch.float32)).expand(config.d_inner, -1)
    assert torch.equal(block.A_log.detach(), expected)  # S4D-real: A[d, n] = -(n + 1)
    dt = F.softplus(block.dt_proj.bias.detach())  # (e,)
    assert dt.min() >= config.dt_min * (1 - 1e-4) and dt.max() <= config.dt_max * (1 + 1e-4)
    assert dt.max() / dt.min() > 10  # spread over the time scales, not one value
    assert block.conv1d.groups == config.d_inner and block.conv1d.kernel_size == (config.d_conv,)
    assert math.isclose(block.D.detach().mean().item(), 1.0)
