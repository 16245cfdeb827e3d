"""Triton kernels of :mod:`gmp.models.stacked_ops`: each operator one kernel, each network its
own activation (its kind read by the kernel, no mask over the other kinds).

Importing this module registers them as the operators' CUDA implementations
(:class:`gmp.models.stacked.StackedDeepMLP` imports it when it runs on CUDA); they are checked (on the CPU
in Triton's interpreter, ``TRITON_INTERPRET=1``, against the torch reference:
``tests/test_stacked_ops.py``). The element-wise formulas are those of
:func:`gmp.models.stacked_ops.phi_reference` and :func:`~gmp.models.stacked_ops.phi_derivative_reference`;
a NaN input stays NaN (as ``torch.relu``'s does), so that a diverged network shows in its loss.
Divisions and square roots are rounded as IEEE's (``div_rn``, ``sqrt_rn``, not the approximate
instructions Triton emits for ``/`` and ``sqrt``), and ``tanh`` and ``exp(z) - 1`` near 0 take their
series, so that the kernels differ from torch's float32 by rounding, not by a formula's cancellation.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import stacked_ops

assert stacked_ops.KINDS == ["tanh", "relu", "leaky_relu", "elu", "selu", "gelu"], "the kernels' kind numbers changed"

SELU_ALPHA: tl.constexpr = tl.constexpr(stacked_ops.SELU_ALPHA)
SELU_SCALE: tl.constexpr = tl.constexpr(stacked_ops.SELU_SCALE)

ROWS = 64
"""Batch rows a program of the activation kernels holds at once (it loops over more)."""
COLUMNS = 32
"""Features (columns) per program of the activation kernels: a program owns them over the whole batch."""


@triton.jit
def _div(a, b):
    """``a / b`` rounded as IEEE's in float32 (``div_rn``; Triton's ``/`` is approximate there)."""
    if a.dtype == tl.float32:
        q = tl.div_rn(a, b)
    else:
        q = a / b
    return q


@triton.jit
def _rsqrt(a):
    """``1 / sqrt(a)`` rounded as IEEE's in float32 (``sqrt_rn``, ``div_rn``)."""
    if a.dtype == tl.float32:
        r = tl.div_rn(1.0 + 0.0 * a, tl.sqrt_rn(a))
    else:
        r = 1.0 / tl.sqrt(a)
    return r


@triton.jit
def _tanh(z):
    """``tanh(z)``: ``(1 - e) / (1 + e)`` with ``e = exp(-2|z|)``, and its series below ``|z| = 0.1``, where
    ``1 - e`` would lose the relative precision that ``torch.tanh`` keeps."""
    e = tl.exp(-2.0 * tl.abs(z))
    t = _div(1.0 - e, 1.0 + e)
    t = tl.where(z < 0, -t, t)
    z2 = z * z
    series = z * (1.0 + z2 * (-1.0 / 3 + z2 * (2.0 / 15 + z2 * (-17.0 / 315 + z2 * (62.0 / 2835 + z2 * (-1382.0 / 155925))))))
    return tl.where(tl.abs(z) < 0.1, series, t)


@triton.jit
def _expm1_negative(z):
    """``exp(z) - 1`` for ``z <= 0`` (0 elsewhere), by its series above ``z = -0.1``, where ``exp(z) - 1``
    would lose the relative precision that ``torch.expm1`` keeps."""
    z = tl.where(z > 0, 0.0, z)
    series = z * (1.0 + z * (0.5 + z * (1.0 / 6 + z * (1.0 / 24 + z * (1.0 / 120 + z * (1.0 / 720 + z * (1.0 / 5040)))))))
    return tl.where(z > -0.1, series, tl.exp(z) - 1.0)


@triton.jit
def _sigmoid(z):
    e = 1.0 + tl.exp(-z)
    return _div(e * 0.0 + 1.0, e)


@triton.jit
def _phi(z, kind):
    negative = _expm1_negative(z)
    y = tl.where(kind == 0, _tanh(z), tl.where(z > 0, z, 0.0))
    y = tl.where(kind == 2, tl.where(z > 0, z, 0.01 * z), y)
    y = tl.where(kind == 3, tl.where(z > 0, z, negative), y)
    y = tl.where(kind == 4, SELU_SCALE * tl.where(z > 0, z, SELU_ALPHA * negative), y)
    y = tl.where(kind == 5, z * _sigmoid(1.702 * z), y)
    return tl.where(z != z, z, y)


@triton.jit
def _phi_derivative(z, kind):
    t = _tanh(z)
    positive = z > 0
    exp = tl.exp(tl.where(positive, 0.0, z))
    sig = _sigmoid(1.702 * z)
    d = tl.where(kind == 0, 1.0 - t * t, tl.where(positive, 1.0, 0.0))
    d = tl.where(kind == 2, tl.where(positive, 1.0, tl.full(z.shape, 0.01, z.dtype)), d)
    d = tl.where(kind == 3, tl.where(positive, 1.0, exp), d)
    d = tl.where(kind == 4, SELU_SCALE * tl.where(positive, 1.0, SELU_ALPHA * exp), d)
    d = tl.where(kind == 5, sig + 1.702 * z * sig * (1.0 - sig), d)
    return d


@triton.jit
def _column_block(s_ptr, kind_ptr, a_ptr, batch, width, BB: tl.constexpr, BC: tl.constexpr):
    """This program's network and block of columns: the columns, their mask and offsets in a (networks, width)
    vector, their scales ``s``, the network's activation kind and gain ``a``, the network's first element in a
    (networks, batch, width) tensor, and the rows of one tile."""
    net = tl.program_id(0)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    cmask = cols < width
    vec = net * width + cols
    s = tl.load(s_ptr + vec, mask=cmask, other=1.0)
    return (net, cols, cmask, vec, s, tl.load(kind_ptr + net), tl.load(a_ptr + net),
            net.to(tl.int64) * batch * width, tl.arange(0, BB))


@triton.jit
def _tile(base, r0, rows0, cols, cmask, batch, width):
    """The mask and offsets of the tile of rows ``r0 + rows0`` of this program's columns."""
    rows = r0 + rows0
    return (rows[:, None] < batch) & cmask[None, :], base + rows[:, None] * width + cols[None, :]


@triton.jit
def _forward_kernel(u_ptr, s_ptr, kind_ptr, a_ptr, b_ptr, w_ptr, bias_ptr, rm_ptr, rv_ptr, on_ptr,
                    y_ptr, mean_ptr, rstd_ptr, batch, width, momentum, eps,
                    USE_BN: tl.constexpr, TRAINING: tl.constexpr, BB: tl.constexpr, BC: tl.constexpr):
    net, cols, cmask, vec, s, kind, a, base, rows0 = _column_block(s_ptr, kind_ptr, a_ptr, batch, width, BB, BC)
    b = tl.load(b_ptr + net)
    mean = s * 0.0
    rstd = s * 0.0 + 1.0
    if USE_BN:
        on = tl.load(on_ptr + net) != 0
        w = tl.load(w_ptr + vec, mask=cmask, other=1.0)
        beta = tl.load(bias_ptr + vec, mask=cmask, other=0.0)
        if TRAINING:
            total = s * 0.0
            for r0 in range(0, batch, BB):
                m, offsets = _tile(base, r0, rows0, cols, cmask, batch, width)
                h = tl.load(u_ptr + offsets, mask=m, other=0.0) * s[None, :]
                total += tl.sum(h, axis=0)
            batch_mean = _div(total, total * 0.0 + batch)
            squares = s * 0.0
            for r0 in range(0, batch, BB):
                m, offsets = _tile(base, r0, rows0, cols, cmask, batch, width)
                h = tl.load(u_ptr + offsets, mask=m, other=0.0) * s[None, :]
                d = tl.where(m, h - batch_mean[None, :], 0.0)
                squares += tl.sum(d * d, axis=0)
            var = _div(squares, squares * 0.0 + batch)
            rm = tl.load(rm_ptr + vec, mask=cmask, other=0.0)
            rv = tl.load(rv_ptr + vec, mask=cmask, other=1.0)
            unbiased = _div(squares, squares * 0.0 + tl.maximum(batch - 1, 1))
            tl.store(rm_ptr + vec, (1 - momentum) * rm + momentum * batch_mean, mask=cmask & on)
            tl.store(rv_ptr + vec, (1 - momentum) * rv + momentum * unbiased, mask=cmask & on)
        else:
            batch_mean = tl.load(rm_ptr + vec, mask=cmask, other=0.0)
            var = tl.load(rv_ptr + vec, mask=cmask, other=1.0)
        mean = tl.where(on, batch_mean, 0.0)
        rstd = tl.where(on, _rsqrt(var + eps), 1.0)
    tl.store(mean_ptr + vec, mean, mask=cmask)
    tl.store(rstd_ptr + vec, rstd, mask=cmask)
    for r0 in range(0, batch, BB):
        m, offsets = _tile(base, r0, rows0, cols, cmask, batch, width)
        h = tl.load(u_ptr + offsets, mask=m, other=0.0) * s[None, :]
        z = h
        if USE_BN:
            z = tl.where(on, (h - mean[None, :]) * rstd[None, :] * w[None, :] + beta[None, :], h)
        tl.store(y_ptr + offsets, a * _phi(z, kind) + b, mask=m)


@triton.jit
def _backward_kernel(dy_ptr, u_ptr, s_ptr, kind_ptr, a_ptr, w_ptr, bias_ptr, mean_ptr, rstd_ptr, on_ptr,
                     du_ptr, ds_ptr, dw_ptr, db_ptr, batch, width,
                     USE_BN: tl.constexpr, BB: tl.constexpr, BC: tl.constexpr):
    net, cols, cmask, vec, s, kind, a, base, rows0 = _column_block(s_ptr, kind_ptr, a_ptr, batch, width, BB, BC)
    dweight = s * 0.0
    dbias = s * 0.0
    if USE_BN:
        on = tl.load(on_ptr + net) != 0
        w = tl.load(w_ptr + vec, mask=cmask, other=1.0)
        beta = tl.load(bias_ptr + vec, mask=cmask, other=0.0)
        mean = tl.load(mean_ptr + vec, mask=cmask, other=0.0)
        rstd = tl.load(rstd_ptr + vec, mask=cmask, other=1.0)
        for r0 in range(0, batch, BB):
            m, offsets = _tile(base, r0, rows0, cols, cmask, batch, width)
            h = tl.load(u_ptr + offsets, mask=m, other=0.0) * s[None, :]
            xhat = (h - mean[None, :]) * rstd[None, :]
            z = tl.where(on, xhat * w[None, :] + beta[None, :], h)
            dz = tl.where(m, tl.load(dy_ptr + offsets, mask=m, other=0.0) * a * _phi_derivative(z, kind), 0.0)
            dweight += tl.sum(dz * xhat, axis=0)
            dbias += tl.sum(dz, axis=0)
        dweight = tl.where(on, dweight, 0.0)
        dbias = tl.where(on, dbias, 0.0)
    tl.store(dw_ptr + vec, dweight, mask=cmask)
    tl.store(db_ptr + vec, dbias, mask=cmask)
    ds = s * 0.0
    for r0 in range(0, batch, BB):
        m, offsets = _tile(base, r0, rows0, cols, cmask, batch, width)
        u = tl.load(u_ptr + offsets, mask=m, other=0.0)
        h = u * s[None, :]
        dy = tl.load(dy_ptr + offsets, mask=m, other=0.0)
        if USE_BN:
            xhat = (h - mean[None, :]) * rstd[None, :]
            z = tl.where(on, xhat * w[None, :] + beta[None, :], h)
            dz = dy * a * _phi_derivative(z, kind)
            dh = tl.where(on, (w * rstd)[None, :] * (dz - _div(dbias[None, :] + xhat * dweight[None, :], dz * 0.0 + batch)), dz)
        else:
            dh = dy * a * _phi_derivative(h, kind)
        dh = tl.where(m, dh, 0.0)
        tl.store(du_ptr + offsets, dh * s[None, :], mask=m)
        ds += tl.sum(dh * u, axis=0)
    tl.store(ds_ptr + vec, ds, mask=cmask)


@triton.jit
def _update_kernel(P_ptr, V_ptr, buf_ptr, ds_ptr, s_ptr, rg_ptr, rp_ptr, width, lr, momentum, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < width
    offsets = row.to(tl.int64) * width + cols
    P = tl.load(P_ptr + offsets, mask=m, other=0.0)
    V = tl.load(V_ptr + offsets, mask=m, other=0.0)
    buf = tl.load(buf_ptr + offsets, mask=m, other=0.0)
    s = tl.load(s_ptr + row)
    c = -tl.load(ds_ptr + row) * s * s * s
    G = P + c * V
    tl.store(rg_ptr + row, tl.sum(G * G, axis=0))
    tl.store(rp_ptr + row, tl.sum(P * P, axis=0))
    buf = momentum * buf + G
    V = V - lr * buf
    tl.store(buf_ptr + offsets, buf, mask=m)
    tl.store(V_ptr + offsets, V, mask=m)
    tl.store(s_ptr + row, _rsqrt(tl.sum(V * V, axis=0)))


def _contiguous(*tensors):
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError("the stacked kernels read contiguous tensors")


def activation_forward(u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, use_bn, training, momentum,
                       eps):
    _contiguous(u, s, running_mean, running_var)
    size, batch, width = u.shape
    y = u.new_empty(u.shape)
    mean, rstd = u.new_empty(size, width), u.new_empty(size, width)
    grid = (size, triton.cdiv(width, COLUMNS))
    _forward_kernel[grid](u, s, kind, a, b, weight, bias, running_mean, running_var, bn_mask, y, mean, rstd, batch,
                          width, float(momentum), float(eps), USE_BN=bool(use_bn), TRAINING=bool(training), BB=ROWS,
                          BC=COLUMNS)
    return y, mean, rstd


def activation_backward(dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, use_bn):
    dy = dy.contiguous()
    _contiguous(u, s, mean, rstd)
    size, batch, width = u.shape
    du, ds = u.new_empty(u.shape), u.new_empty(size, 1, width)
    dweight, dbias = u.new_empty(size, width), u.new_empty(size, width)
    grid = (size, triton.cdiv(width, COLUMNS))
    _backward_kernel[grid](dy, u, s, kind, a, weight, bias, mean, rstd, bn_mask, du, ds, dweight, dbias, batch, width,
                           USE_BN=bool(use_bn), BB=ROWS, BC=COLUMNS)
    return du, ds, dweight, dbias


def momentum_update_(P, V, buf, ds, s, rows_g, rows_p, lr, momentum):
    _contiguous(P, V, buf, ds, s, rows_g, rows_p)
    size, rows, width = V.shape
    _update_kernel[(size * rows,)](P, V, buf, ds, s, rows_g, rows_p, width, float(lr), float(momentum),
                                   BLOCK=triton.next_power_of_2(width))


stacked_ops._forward_op.register_kernel("cuda")(activation_forward)
stacked_ops._backward_op.register_kernel("cuda")(activation_backward)
stacked_ops._update_op.register_kernel("cuda")(momentum_update_)
