"""Facts about the positional encoders of Section 6 of the SBSNN paper."""

import math

import numpy as np
import pytest
import torch

from gmp import PositionalEncoding
from gmp.encoders import AuthorEncoding, rotation_matrix


@pytest.mark.parametrize("levels,dim", [(1, 1), (4, 2), (6, 2), (3, 5)])
def test_squared_norm_equals_dimension(levels, dim):
    p = torch.rand(100, dim, dtype=torch.float64) * 4 - 2
    enc = PositionalEncoding(levels)
    e = enc(p)
    assert e.shape == (100, 2 * levels * dim) == (100, enc.out_features(dim))
    assert torch.allclose((e ** 2).sum(-1), torch.full((100,), float(e.shape[-1]), dtype=torch.float64))


def test_rotated_squared_norm_equals_dimension():
    p = torch.rand(50, 2, dtype=torch.float64) * 2 - 1
    enc = PositionalEncoding(5, rotated=True)
    e = enc(p)
    assert e.shape == (50, 3 * 2 * 5 * 2) == (50, enc.out_features(2))
    assert torch.allclose((e ** 2).sum(-1), torch.full((50,), 60.0, dtype=torch.float64))


def test_features_are_sqrt2_sin_cos_of_doubling_frequencies():
    p = torch.tensor([[0.3, -0.7]], dtype=torch.float64)
    e = PositionalEncoding(3)(p)[0]
    expected = []
    for c in (0.3, -0.7):
        for i in range(3):
            expected += [math.sqrt(2) * math.sin(2 ** i * math.pi * c), math.sqrt(2) * math.cos(2 ** i * math.pi * c)]
    assert torch.allclose(e, torch.tensor(expected, dtype=torch.float64))


def test_rotated_is_concatenation_of_three_rotated_encodings():
    p = torch.rand(20, 2, dtype=torch.float64) * 2 - 1
    plain, rotated = PositionalEncoding(4), PositionalEncoding(4, rotated=True)
    parts = []
    for k in range(3):
        theta = 2 * math.pi * k / 3
        c, s = math.cos(theta), math.sin(theta)
        q = torch.stack((c * p[:, 0] - s * p[:, 1], s * p[:, 0] + c * p[:, 1]), dim=-1)
        parts.append(plain(q))
    assert torch.allclose(rotated(p), torch.cat(parts, dim=-1))
    # the first block is the unrotated encoding, the others differ from it
    assert torch.allclose(rotated(p)[:, :16], plain(p))
    assert not torch.allclose(rotated(p)[:, 16:32], plain(p))


def test_rotation_matrix_turns_counterclockwise():
    assert torch.allclose(rotation_matrix(math.pi / 2) @ torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 1.0], dtype=torch.float64), atol=1e-7)
    r = rotation_matrix(2 * math.pi / 3)
    assert torch.allclose(r @ r @ r, torch.eye(2, dtype=torch.float64), atol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError):
        PositionalEncoding(0)
    with pytest.raises(ValueError, match="2-D coordinates"):
        PositionalEncoding(2, rotated=True)(torch.zeros(4, 3))


def test_axis_energy_detects_line_patterns():
    from gmp.experiments.sbsnn_encoders import axis_energy

    grid = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    x, y = np.meshgrid(grid, grid, indexing="ij")
    assert axis_energy(np.sin(3 * x) + np.cos(5 * y)) == pytest.approx(1.0)
    assert axis_energy(np.sin(3 * x + 2 * y)) == pytest.approx(0.0, abs=1e-12)
    assert 0 < axis_energy(np.random.default_rng(0).normal(size=(32, 32))) < 0.2


# ---------------------------------------------------------------- issue 19: safe dtypes

def test_integer_coordinates_are_refused():
    with pytest.raises(ValueError, match="floating-point"):
        PositionalEncoding(3)(torch.tensor([[0, 1]]))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rotated", [False, True])
def test_half_precision_input_is_encoded_without_overflow(dtype, rotated):
    p = (torch.rand(64, 2) * 2 - 1).to(dtype)
    enc = PositionalEncoding(10, rotated=rotated)  # angles up to 2^9 pi sqrt(2): float16 would resolve 1 or 2 rad
    e = enc(p)
    assert e.dtype == dtype and torch.isfinite(e).all()
    expected = enc(p.float())  # float32 encoding of the same (rounded) coordinates
    assert torch.allclose(e.float(), expected, atol=2e-2)


@pytest.mark.parametrize("rotated", [False, True])
def test_accepted_levels_are_accurate_to_1e_3_and_one_more_is_refused(rotated):
    """Features within 1e-3 of float64 on the same float32 coordinates in [-1, 1]; the cap is the bound
    sqrt(2) K eps 2^(L-1) pi <= 1e-3 (K = 1, or 2 for the rotated copies), not a looser one."""
    top = 10 if rotated else 11
    p = torch.rand(20000, 2) * 2 - 1
    p[:4] = torch.tensor([[1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [0.9999999, -0.9999999]])
    enc = PositionalEncoding(top, rotated=rotated)
    assert (enc(p).double() - enc(p.double())).abs().max() < 1e-3
    with pytest.raises(ValueError, match=rf"levels={top + 1} is too many for torch.float32 input: .* more than "
                                         rf"1e-03.*at most {top} levels.*or float64 coordinates"):
        PositionalEncoding(top + 1, rotated=rotated)(p)
    with pytest.raises(ValueError, match=rf"levels={top + 1} is too many for torch.bfloat16 input"):
        PositionalEncoding(top + 1, rotated=rotated)(p.bfloat16())
    with pytest.raises(ValueError, match="too many"):
        PositionalEncoding(20, rotated=rotated)(p)  # accepted before, with features off by up to 0.14


@pytest.mark.parametrize("rotated,levels", [(False, 40), (True, 39)])
def test_float64_levels_are_capped_by_the_same_bound_and_not_told_to_use_float64(rotated, levels):
    p = torch.rand(10, 2, dtype=torch.float64) * 2 - 1
    PositionalEncoding(levels, rotated=rotated)(p)
    with pytest.raises(ValueError, match=rf"levels={levels + 1} is too many for torch.float64 input") as err:
        PositionalEncoding(levels + 1, rotated=rotated)(p)
    assert "float64 coordinates" not in str(err.value) and "use fewer levels" in str(err.value)


@pytest.mark.parametrize("rotated", [False, True])
def test_float32_and_float64_outputs_are_computed_as_before(rotated):
    p = torch.rand(40, 2, dtype=torch.float64) * 2 - 1
    enc = PositionalEncoding(6, rotated=rotated)
    for dtype in (torch.float32, torch.float64):
        q = p.to(dtype)
        copies = [q @ r.to(dtype).T for r in enc.rotations] if rotated else [q]
        angles = [c.unsqueeze(-1) * enc.frequencies.to(dtype) for c in copies]
        before = torch.cat([math.sqrt(2.0) * torch.stack((a.sin(), a.cos()), dim=-1).flatten(start_dim=-3)
                            for a in angles], dim=-1)
        assert torch.equal(enc(q), before)


@pytest.mark.parametrize("rotated, per, most", [(False, 4, 1024), (True, 12, 1023)])
def test_author_encoding_refuses_widths_whose_angles_overflow_float64(rotated, per, most):
    """K = 1025 frequencies reach 2^1024, which float64 cannot hold: the features would be NaN. The widest
    accepted encoder gives finite features at the corners of [-1, 1]^2 (the rotated copies reach 1.37)."""
    corners = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]], dtype=torch.float64)
    assert torch.isfinite(AuthorEncoding(most * per, rotated=rotated)(corners)).all()
    with pytest.raises(ValueError, match=f"at most K = {most}, width {most * per}, is accepted"):
        AuthorEncoding((most + 1) * per, rotated=rotated)
