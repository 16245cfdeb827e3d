"""The hyperspherical map of :mod:`gmp.hyperspherical` as one compiled pass per direction on the CPU.

The source below (C99 with the vector extensions of GCC and Clang; no library beyond libc and
libm) is compiled on first use with the system's C compiler (``$CC``, else ``cc``) into
``$GMP_KERNELS`` (default ``~/.cache/gmp/kernels``), once per source, compiler, flags and
processor, and loaded with ``ctypes``; before a process uses a library, :func:`self_check` compares
its numbers with the torch map's, and a build that differs (flags that relax IEEE arithmetic) is not
used (:func:`describe` says which map runs, for provenance). Where no compiler works, :func:`kernel` returns None,
:func:`unavailable` says why (a ``RuntimeWarning`` says it once), and the map runs in torch
instead, at several passes over the angles. ``GMP_NATIVE=0`` turns the compiled map off.

Each row of angles is read once per direction. Forward: its sines and cosines (one vectorised
loop, no library calls: a reduction by multiples of pi/2 and Taylor polynomials, whose absolute
error is within about an ulp of 1, as the C library's) go to a scratch row; the products
``P_j = scale sin(theta_0) ... sin(theta_{j-1})`` run over it and the row of ``r u(theta)`` is
written. Backward: the same sines, cosines and products, then the reverse recurrence
``Q_j = g_j cos(theta_j) + sin(theta_j) Q_{j+1}`` (``Q_k = g_k``) gives, with no division,
``dL/dtheta_j = P_j (cos(theta_j) Q_{j+1} - sin(theta_j) g_j)`` and ``dL/dscale = Q_0``. Both
scans take a vector of numbers at a time (eight, or sixteen float32 numbers where the processor
has AVX-512): within it, a scan in log2 steps of vector shuffles; between vectors, one
multiplication (one multiply-add backward) carried along the row. Rows are split among up to
``torch.get_num_threads()`` threads of torch's own OpenMP pool, one per
:data:`ANGLES_PER_THREAD` angles (:func:`threaded`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from pathlib import Path

import torch

SOURCE = r"""
/* This file includes itself once per floating-point type (float32, float64) and so compiles twice over. */
#ifndef T
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h> /* fabs, sin, cos of the argument's type */
#ifdef _OPENMP
#include <omp.h>
#endif

/* 1 when built with OpenMP (rows split among threads), else 0. */
int openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}

#define T float
#define LANE unsigned int
#ifdef __AVX512F__
#define VL 16 /* numbers per vector in the scans */
#else
#define VL 8
#endif
#define NAME(f) float32_##f
#define BIG 8192.0f
#define ROUNDER 12582912.0f
#define TWO_OVER_PI 0.636619772367581343f
#define PIO2_1 1.5703125f
#define PIO2_2 4.837512969970703e-4f
#define PIO2_3 7.549790126404332e-08f
#define SIN_POLY(r2) (-1.0f / 6 + r2 * (1.0f / 120 + r2 * (-1.0f / 5040 + r2 * (1.0f / 362880))))
#define COS_POLY(r2) (-0.5f + r2 * (1.0f / 24 + r2 * (-1.0f / 720 + r2 * (1.0f / 40320 + r2 * (-1.0f / 3628800)))))
#include __FILE__
#undef T
#undef LANE
#undef VL
#undef NAME
#undef BIG
#undef ROUNDER
#undef TWO_OVER_PI
#undef PIO2_1
#undef PIO2_2
#undef PIO2_3
#undef SIN_POLY
#undef COS_POLY

#define T double
#define LANE unsigned long long
#define VL 8
#define NAME(f) float64_##f
#define BIG 1048576.0
#define ROUNDER 6755399441055744.0
#define TWO_OVER_PI 0.63661977236758134308
#define PIO2_1 1.5707963276654482
#define PIO2_2 -8.705515692000731e-10
#define PIO2_3 -3.50343439808993e-19
#define SIN_POLY(r2) (-1.0 / 6 + r2 * (1.0 / 120 + r2 * (-1.0 / 5040 + r2 * (1.0 / 362880 + r2 * (-1.0 / 39916800 \
  + r2 * (1.0 / 6227020800.0 + r2 * (-1.0 / 1307674368000.0 + r2 * (1.0 / 355687428096000.0))))))))
#define COS_POLY(r2) (-0.5 + r2 * (1.0 / 24 + r2 * (-1.0 / 720 + r2 * (1.0 / 40320 + r2 * (-1.0 / 3628800 \
  + r2 * (1.0 / 479001600.0 + r2 * (-1.0 / 87178291200.0 + r2 * (1.0 / 20922789888000.0 \
  + r2 * (-1.0 / 6402373705728000.0)))))))))
#include __FILE__

#else

/* Sines and cosines in one loop that compilers vectorise: the angle less the nearest multiple
   q pi/2 (pi/2 in three parts, the first two short enough that q times them is exact while
   |x| <= BIG), then the Taylor polynomials of sin and cos on [-pi/4, pi/4] (their first omitted
   terms are below half an ulp), placed by the quadrant q mod 4. Adding ROUNDER (1.5 times the
   power of two at which the spacing of numbers is 1) rounds x 2/pi to the integer q and leaves
   q's low bits in the low bits of the sum. Angles beyond BIG (and infinities) take the C
   library's functions; NaN gives NaN. */
static void NAME(sincos)(ptrdiff_t k, const T *restrict x, T *restrict S, T *restrict C) {
  int big = 0;
  for (ptrdiff_t j = 0; j < k; j++) {
    T t = x[j] * TWO_OVER_PI + ROUNDER, q = t - ROUNDER;
    LANE n;
    memcpy(&n, &t, sizeof n);
    T r = x[j] - q * PIO2_1;
    r = r - q * PIO2_2;
    r = r - q * PIO2_3;
    T r2 = r * r, s = r + r * r2 * SIN_POLY(r2), c = 1 + r2 * COS_POLY(r2);
    T sv = (n & 1) ? c : s, cv = (n & 1) ? s : c;
    S[j] = (n & 2) ? -sv : sv;
    C[j] = ((n + 1) & 2) ? -cv : cv;
    big |= fabs(x[j]) > BIG;
  }
  if (big)
    for (ptrdiff_t j = 0; j < k; j++)
      if (fabs(x[j]) > BIG) {
        S[j] = sin(x[j]);
        C[j] = cos(x[j]);
      }
}

/* Vectors of VL numbers (GCC and Clang vector extensions), loaded and stored unaligned. */
typedef T NAME(vec) __attribute__((vector_size(VL * sizeof(T))));
typedef LANE NAME(lanes) __attribute__((vector_size(VL * sizeof(T))));
#define V NAME(vec)
#ifdef __clang__
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (NAME(lanes)){__VA_ARGS__})
#endif
/* UP(d): lane i takes a's lane i - d, or b's lane 0 where i < d; DOWN(d): lane i takes a's lane
   i + d, or b's lane 0 where i + d >= VL. */
#if VL == 16
#define UP1(a, b) SHUFFLE(b, a, 0, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30)
#define UP2(a, b) SHUFFLE(b, a, 0, 0, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29)
#define UP4(a, b) SHUFFLE(b, a, 0, 0, 0, 0, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27)
#define UP8(a, b) SHUFFLE(b, a, 0, 0, 0, 0, 0, 0, 0, 0, 16, 17, 18, 19, 20, 21, 22, 23)
#define DOWN1(a, b) SHUFFLE(a, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
#define DOWN2(a, b) SHUFFLE(a, b, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 16)
#define DOWN4(a, b) SHUFFLE(a, b, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 16, 16, 16)
#define DOWN8(a, b) SHUFFLE(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 16, 16, 16, 16, 16, 16, 16, 16)
#define ONES {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}
#else
#define UP1(a, b) SHUFFLE(b, a, 0, 8, 9, 10, 11, 12, 13, 14)
#define UP2(a, b) SHUFFLE(b, a, 0, 0, 8, 9, 10, 11, 12, 13)
#define UP4(a, b) SHUFFLE(b, a, 0, 0, 0, 0, 8, 9, 10, 11)
#define DOWN1(a, b) SHUFFLE(a, b, 1, 2, 3, 4, 5, 6, 7, 8)
#define DOWN2(a, b) SHUFFLE(a, b, 2, 3, 4, 5, 6, 7, 8, 8)
#define DOWN4(a, b) SHUFFLE(a, b, 4, 5, 6, 7, 8, 8, 8, 8)
#define ONES {1, 1, 1, 1, 1, 1, 1, 1}
#endif

static inline V NAME(load)(const T *p) { V v; memcpy(&v, p, sizeof v); return v; }
static inline void NAME(store)(T *p, V v) { memcpy(p, &v, sizeof v); }

/* Lane i of the result: v[0] ... v[i-1] (1 in lane 0); *last: the product of all lanes. The
   products run in the steps of a scan (lane i with lane i - d, d = 1, 2, 4, ...), not along a chain. */
static inline V NAME(products_before)(V v, T *last) {
  const V one = ONES;
  v *= UP1(v, one);
  v *= UP2(v, one);
  v *= UP4(v, one);
#if VL == 16
  v *= UP8(v, one);
#endif
  *last = v[VL - 1];
  return UP1(v, one);
}

/* Lane i of the result composes the maps Q -> A_l + B_l Q of lanes l = i, i + 1, ..., VL - 1
   (the first applied last), in the steps of a scan. */
static inline void NAME(compose_after)(V *A, V *B) {
  const V zero = {0}, one = ONES;
  *A += *B * DOWN1(*A, zero);
  *B *= DOWN1(*B, one);
  *A += *B * DOWN2(*A, zero);
  *B *= DOWN2(*B, one);
  *A += *B * DOWN4(*A, zero);
  *B *= DOWN4(*B, one);
#if VL == 16
  *A += *B * DOWN8(*A, zero);
  *B *= DOWN8(*B, one);
#endif
}

/* P[j] = scale s[0] ... s[j-1] for j < k where P is not NULL, and w[j] = P[j] C[j] where w is
   not NULL; returns scale s[0] ... s[k-1]. */
static T NAME(prefix)(ptrdiff_t k, T scale, const T *restrict S, const T *restrict C, T *restrict P,
                      T *restrict w) {
  ptrdiff_t blocks = k / VL, j = 0;
  T carry = scale, total;
  for (ptrdiff_t b = 0; b < blocks; b++, j += VL) {
    V p = NAME(products_before)(NAME(load)(S + j), &total) * carry;
    if (P) NAME(store)(P + j, p);
    if (w) NAME(store)(w + j, p * NAME(load)(C + j));
    carry *= total;
  }
  for (; j < k; j++) {
    if (P) P[j] = carry;
    if (w) w[j] = carry * C[j];
    carry *= S[j];
  }
  return carry;
}

/* One row: w = scale u(theta), k angles, k + 1 coordinates; scratch holds 2k numbers. */
static void NAME(forward_row)(ptrdiff_t k, T scale, const T *restrict theta, T *restrict w, T *scratch) {
  T *S = scratch, *C = S + k;
  NAME(sincos)(k, theta, S, C);
  w[k] = NAME(prefix)(k, scale, S, C, NULL, w);
}

/* One row's gradients for the upstream gradient g (k + 1 numbers); scratch holds 3k numbers.
   Q_j = g_j C_j + S_j Q_{j+1} from Q_k = g_k down; dtheta_j = P_j (C_j Q_{j+1} - S_j g_j);
   dscale = Q_0. In a block of VL, lane i's composed map Q -> A_i + B_i Q takes the Q just after
   the block to Q_{j+i}. */
static T NAME(backward_row)(ptrdiff_t k, T scale, const T *restrict theta, const T *restrict g,
                            T *restrict gt, T *scratch) {
  const V zero = {0};
  ptrdiff_t blocks = k / VL;
  T *S = scratch, *C = S + k, *P = C + k;
  NAME(sincos)(k, theta, S, C);
  NAME(prefix)(k, scale, S, C, P, NULL);
  T q = g[k];
  for (ptrdiff_t j = k - 1; j >= VL * blocks; j--) {
    gt[j] = P[j] * (C[j] * q - S[j] * g[j]);
    q = g[j] * C[j] + S[j] * q;
  }
  for (ptrdiff_t j = VL * (blocks - 1); j >= 0; j -= VL) {
    V s = NAME(load)(S + j), c = NAME(load)(C + j), gg = NAME(load)(g + j);
    V A = gg * c, B = s;
    NAME(compose_after)(&A, &B);
    V after = zero + q;                   /* Q just after the block, in every lane */
    V Q = A + B * after;                  /* lane i: Q_{j+i} */
    NAME(store)(gt + j, NAME(load)(P + j) * (c * DOWN1(Q, after) - s * gg));
    q = A[0] + B[0] * q;
  }
  return q;
}
#undef V
#undef SHUFFLE
#undef UP1
#undef UP2
#undef UP4
#undef UP8
#undef DOWN1
#undef DOWN2
#undef DOWN4
#undef DOWN8
#undef ONES

/* The m rows, split among `threads` threads of the OpenMP runtime that torch runs on (the
   library loaded already under the same name serves this one), or in this thread without
   OpenMP: each row's map (g NULL: w = scale * u(theta) into `out`), or its gradients (the
   angles' into `out`, the scale's into gscale) from the gradient g of w. Returns 0, or 1 when a
   thread could not allocate its scratch row. */
static int NAME(rows)(ptrdiff_t m, ptrdiff_t k, const T *scale, const T *theta, const T *g, T *out, T *gscale,
                      int threads) {
  int failed = 0;
#pragma omp parallel num_threads(threads) if (threads > 1 && m > 1) reduction(| : failed)
  {
    ptrdiff_t id = 0, n = 1;
#ifdef _OPENMP
    id = omp_get_thread_num();
    n = omp_get_num_threads();
#endif
    T *scratch = malloc(sizeof(T) * (size_t)((g ? 3 : 2) * k + 1));
    failed = scratch == NULL;
    for (ptrdiff_t r = m * id / n; scratch && r < m * (id + 1) / n; r++)
      if (g)
        gscale[r] = NAME(backward_row)(k, scale[r], theta + r * k, g + r * (k + 1), out + r * k, scratch);
      else
        NAME(forward_row)(k, scale[r], theta + r * k, out + r * (k + 1), scratch);
    free(scratch);
  }
  return failed;
}

int NAME(forward)(ptrdiff_t m, ptrdiff_t k, const T *scale, const T *theta, T *w, int threads) {
  return NAME(rows)(m, k, scale, theta, NULL, w, NULL, threads);
}

int NAME(backward)(ptrdiff_t m, ptrdiff_t k, const T *scale, const T *theta, const T *g, T *gtheta,
                   T *gscale, int threads) {
  return NAME(rows)(m, k, scale, theta, g, gtheta, gscale, threads);
}
#endif
"""
"""The C source of the kernel. Its ``<dtype>_forward`` writes ``scale[:, None] * u(theta)`` and
``<dtype>_backward`` the gradients of the angles and the scales (both return 0, or 1 when out of
memory); ``openmp()`` returns 1 when it was built with OpenMP."""

FLAGS = (
    ("-O3", "-march=native", "-fopenmp"),
    ("-O3", "-fopenmp"),
    ("-O3", "-march=native"),
    ("-O2",),
)
"""Compiler flags, tried in order until a set compiles and loads (:func:`flag_sets` leaves out
those that cannot serve here). ``-march=native`` tunes for this processor (only where its
instruction sets can be read, so that the build's cache key names them). ``-fopenmp`` splits the
rows among torch's threads, only where torch runs on GNU OpenMP loaded as ``libgomp.so.1``:
the kernel's own reference to that name then finds it loaded, so the two share one pool of
threads and do not compete for the cores (two OpenMP runtimes in one process may abort it).
The last set is for compilers that know none of these options. None relaxes IEEE arithmetic,
beyond fusing a multiplication and an addition into one rounding where the processor can; what
``$CC`` adds (``-ffast-math``, say) or a compiler's own default may, which :func:`self_check` finds.
A set that fails to compile is remembered for :data:`RETRY_AFTER_S` (a ``.failed`` file beside the
builds; delete it to try again at once), unless it failed for want of room, time or permission,
which the next process retries."""

RETRY_AFTER_S = 86400
"""How long a compiler's refusal of a set of flags is remembered before it is tried again."""

TRANSIENT = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied",
             "Cannot allocate memory", "Too many open files", "out of memory", "memory exhausted",
             "signal terminated program", "failed due to signal", "unable to execute command", "Killed",
             "CPU time limit exceeded", "File size limit exceeded")
"""Messages of a compilation that failed for a cause of the moment (a full disk, say), not remembered. Among them
are what gcc and clang say when their compiler proper (``cc1``) is killed by a signal or a resource limit (the
out-of-memory killer, ``ulimit -t``), which is no verdict on the flags."""

SELF_CHECK_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12}
"""How far :func:`self_check` lets a library's outputs and gradients lie from the torch map's, relative
to the largest of each: a hundred times (float32) and thousands of times (float64) what a sound build
gives, a hundred-thousandth of what a build that relaxes IEEE arithmetic gives (``-ffast-math`` breaks
the rounding to the nearest multiple of pi/2)."""

ANGLES_PER_THREAD = 32768
"""The fewest angles worth a thread of their own, about 50 microseconds of work, well above what
starting and joining a thread costs; so small layers run in one thread."""

_FAILURE: list[str] = []
_BUILT: dict[str, str] = {}
_LOCK = threading.Lock()


def _kernel_dir() -> Path:
    folder = os.environ.get("GMP_KERNELS") or Path.home() / ".cache" / "gmp" / "kernels"
    return Path(os.path.abspath(os.path.expanduser(folder)))  # relative: from here, not the compiler's scratch folder


def _processor() -> str | None:
    """The machine and its instruction-set flags (what a ``-march=native`` build depends on), or
    None where they cannot be read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return f"{platform.machine()} {line}"
    except OSError:
        pass
    return None


def _torch_openmp() -> bool:
    """Whether torch has loaded GNU OpenMP as ``libgomp.so.1`` (see :data:`FLAGS`)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return any(line.endswith("/libgomp.so.1") for line in maps.splitlines())


def flag_sets() -> list[tuple[str, ...]]:
    """The sets of :data:`FLAGS` that can serve on this machine, in order."""
    return [flags for flags in FLAGS if ("-march=native" not in flags or _processor() is not None)
            and ("-fopenmp" not in flags or _torch_openmp())]


def _whole(path: Path) -> str | None:
    """None when the ELF file ``path`` holds every byte its headers place (its segments and its table of
    sections), else what is missing: a file cut short (a build killed or a disk filled while it was
    written, by a gmp that wrote no more carefully) would otherwise kill the process that maps it
    (SIGBUS). A file of fewer than four bytes that begin an ELF header (none, say) is cut short; a file in another
    format (not ELF) is taken as whole."""
    import struct

    data = path.read_bytes()
    if len(data) < 4 and b"\x7fELF".startswith(data):  # no library of any format is this short
        return f"{len(data)} bytes, less than an ELF header"
    if data[:4] != b"\x7fELF":
        return None
    if len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return f"{len(data)} bytes, less than an ELF header"
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    header = (order + "16x2HI3QI6H") if wide else (order + "16x2HI3II6H")
    _, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _ = struct.unpack_from(header, data)
    ends = [("its table of sections", shoff + shentsize * shnum), ("its table of segments", phoff + phentsize * phnum)]
    segment = (order + "I4xQ16xQ") if wide else (order + "II8xI")  # p_type, p_offset, p_filesz
    for i in range(phnum):
        at = phoff + i * phentsize
        if at + phentsize > len(data):
            break
        kind, offset, size = struct.unpack_from(segment, data, at)
        if kind == 1:  # PT_LOAD
            ends.append((f"segment {i}", offset + size))
    short = [f"{what} ends at byte {end}" for what, end in ends if end > len(data)]
    return f"{len(data)} bytes, but " + ", ".join(short) if short else None


def _sync(path: Path) -> None:
    """Flush the file or folder ``path`` to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _build(compiler: list[str], flags: tuple[str, ...]) -> Path:
    """The shared library for this source, compiler and flags (and processor, for ``-march=native``),
    compiled unless already built; RuntimeError with the compiler's message when it fails, now or
    within :data:`RETRY_AFTER_S` before (:data:`TRANSIENT` failures are not remembered).

    The library is written in a scratch folder, flushed to the disk and checked whole (:func:`_whole`)
    before it is renamed into place, so that no process finds a part of one; one found cut short (left
    by an older gmp) is removed and built again."""
    processor = (_processor() or "") if "-march=native" in flags else ""
    described = "\n".join([SOURCE, *compiler, *flags, processor])
    library = _kernel_dir() / f"hyperspherical-{hashlib.sha256(described.encode()).hexdigest()[:16]}.so"
    failed = library.with_suffix(".failed")
    if library.is_file():
        if _whole(library) is None:
            return library
        library.unlink(missing_ok=True)
    if failed.is_file():
        age = time.time() - failed.stat().st_mtime
        if 0 <= age < RETRY_AFTER_S:
            raise RuntimeError(f"{failed.read_text()} (remembered in {failed}; tried again "
                               f"{RETRY_AFTER_S - age:.0f} s from now, or at once when that file is deleted)")
        failed.unlink(missing_ok=True)
    library.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=library.parent) as scratch:
        source = Path(scratch) / "hyperspherical.c"
        source.write_text(SOURCE)
        built = Path(scratch) / library.name
        done = subprocess.run([*compiler, *flags, "-shared", "-fPIC", "-o", str(built), str(source), "-lm"],
                              capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            _sync(built)
            if (torn := _whole(built)) is not None:
                raise RuntimeError(f"{' '.join(compiler + list(flags))} wrote an incomplete library ({torn})")
            os.replace(built, library)  # atomic: a process beside us loads a whole library or none
            _sync(library.parent)
            return library
        message = f"{' '.join(compiler + list(flags))}: {done.stderr.strip()[-400:]}"
        killed = done.returncode < 0 or done.returncode > 128  # by a signal: itself, or a shell's 128 + N
        if not killed and not any(cause in done.stderr for cause in TRANSIENT):
            (Path(scratch) / "failed").write_text(message)
            os.replace(Path(scratch) / "failed", failed)
            message += f" (remembered in {failed} for {RETRY_AFTER_S} s; delete it to try again at once)"
        raise RuntimeError(message)


def _reference(theta: torch.Tensor, scale: torch.Tensor,
               grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``scale[:, None] * u(theta)`` and its gradients for ``grad``, in float64 by torch's own ``cumprod``
    and autograd: what :func:`self_check` holds a library's numbers to."""
    theta = theta.to(torch.float64, copy=True).requires_grad_(True)
    scale = scale.to(torch.float64, copy=True).requires_grad_(True)
    ones = torch.ones(theta.shape[0], 1, dtype=torch.float64)
    prefix = torch.cumprod(torch.cat([ones, torch.sin(theta)], dim=1), dim=1) * scale[:, None]
    weight = prefix * torch.cat([torch.cos(theta), ones], dim=1)
    weight.backward(grad.double())
    return weight.detach(), theta.grad, scale.grad


def _self_check_cases() -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(theta, scale, grad)`` in float64 that take every branch of the kernel: special angles
    (multiples of pi/4, signed zeros), angles beyond the range of its own sines in either type (the C
    library's then), rows shorter than a vector, of whole vectors and with a rest, degenerate rows (zero
    sines, a zero scale, products that underflow), no angles at all, and enough angles for threads."""
    g = torch.Generator().manual_seed(38)
    pi = torch.pi
    special = torch.tensor([0.0, -0.0, pi / 4, pi / 2, -pi / 2, 3 * pi / 4, pi, -pi, 3 * pi / 2, 2 * pi,
                            5 * pi / 2, -3 * pi, 1.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    large = torch.tensor([8191.0, -8191.5, 8193.0, -9000.25, 1e5, -3e5, 1048575.0, 1048577.0, -2e6, 1e9,
                          12345.678, -54321.5], dtype=torch.float64)
    rows = torch.rand(9, 37, generator=g, dtype=torch.float64) * 20 - 10
    rows[0, :16], rows[1, :12], rows[1, 12:24] = special, large, -large
    rows[2, 5] = rows[2, 30] = 0.0  # zero sines mid-row
    rows[3, :] = 0.0
    rows[4, 36] = pi
    rows[5, :] = 1e-30  # products that underflow in float32, then in float64
    scale = torch.rand(9, generator=g, dtype=torch.float64) * 4 - 2
    scale[6] = 0.0
    cases = [rows, rows[:, :3], rows[:, :7], rows[:, :16], torch.zeros(3, 0, dtype=torch.float64)]
    checked = [(theta.contiguous(), scale[:len(theta)].clone(),
                torch.randn(theta.shape[0], theta.shape[1] + 1, generator=g, dtype=torch.float64)) for theta in cases]
    if torch.get_num_threads() > 1:  # two threads' worth of angles, spread over (-4, 4) without drawing them
        m, k = 4, ANGLES_PER_THREAD // 2 + 1
        checked.append((torch.linspace(-4, 4, m * k, dtype=torch.float64).view(m, k),
                        torch.tensor([0.5, 1.0, -1.5, 2.0], dtype=torch.float64),
                        torch.cos(torch.arange(m * (k + 1), dtype=torch.float64)).view(m, k + 1)))
    return checked


def self_check(kernels: dict[torch.dtype, Kernel]) -> str | None:
    """None when the outputs and gradients of ``kernels`` equal the torch map's (``_reference``, torch's ``cumprod`` and autograd in float64) on
    ``_self_check_cases()`` within :data:`SELF_CHECK_TOLERANCE`, else where and by how much they differ.
    A compiler or flags that relax IEEE arithmetic (``-ffast-math``, a fast default floating-point model)
    break the kernel's rounding and would otherwise give wrong numbers with no sign. Gradients are
    computed even where the first use of the map is under ``torch.no_grad`` or ``torch.inference_mode``."""
    with torch.inference_mode(False), torch.enable_grad():
        return _differs(kernels)


def _differs(kernels: dict[torch.dtype, Kernel]) -> str | None:
    """:func:`self_check` where torch records gradients."""
    for theta, scale, grad in _self_check_cases():
        reference = _reference(theta, scale, grad)
        for dtype, kernel in kernels.items():
            t, s, g = (x.to(dtype) for x in (theta, scale, grad))
            expected = _reference(t, s, g) if dtype != torch.float64 else reference
            got = (kernel.forward(t, s), *kernel.backward(t, s, g))
            for what, mine, theirs in zip(("outputs", "angle gradients", "scale gradients"), got, expected):
                size = theirs.abs().max().item() if theirs.numel() else 0.0
                off = (mine.double() - theirs).abs().max().item() if theirs.numel() else 0.0
                if not off <= SELF_CHECK_TOLERANCE[dtype] * max(size, 1e-300):
                    return (f"its {str(dtype).removeprefix('torch.')} {what} differ from the torch map's by up to "
                            f"{off:.3g} (largest {size:.3g}) on {tuple(theta.shape)} angles")
    return None


def _subnormals_flushed() -> bool:
    """Whether this thread's floating-point unit flushes subnormal numbers to zero (x86's FTZ/DAZ modes),
    read by halving the smallest normal float64."""
    smallest = torch.tensor(2.2250738585072014e-308, dtype=torch.float64)
    return bool(((smallest / 2) == 0).item())


class RoundingModeChanged(RuntimeError):
    """Loading a library changed how this process rounds (see :func:`_open`)."""


def _open(path: Path) -> ctypes.CDLL:
    """Load the library at ``path``, or raise :class:`RoundingModeChanged` when loading it changed how this process rounds:
    a library linked with ``-ffast-math`` (or ``-Ofast``) switches the loading thread to flushing
    subnormal numbers to zero as it loads, which would change every later float computation of the
    process (a Gaussian tail's weight of 1e-314 read as 0) with no sign. The mode is set back first."""
    flushed = _subnormals_flushed()
    library = ctypes.CDLL(str(path))
    if _subnormals_flushed() != flushed:
        torch.set_flush_denormal(flushed)
        raise RoundingModeChanged(f"loading {path.name} switched this process to flushing subnormal numbers to zero "
                           f"(set back; the library is not used): a -ffast-math or -Ofast build does this")
    return library


def _library() -> ctypes.CDLL | None:
    """The compiled library, or None after saying why (a warning, unless ``GMP_NATIVE=0`` asked)."""
    setting = os.environ.get("GMP_NATIVE", "1") or "1"
    if setting not in ("0", "1"):
        raise ValueError(f"GMP_NATIVE={setting!r}: set it to 0 (the torch map) or 1 (the compiled map, the default)")
    if setting == "0":
        _FAILURE.append("turned off by GMP_NATIVE=0")
        return None
    try:
        compiler = shlex.split(os.environ.get("CC") or "cc")
    except ValueError as err:
        _FAILURE.append(f"CC={os.environ['CC']!r} cannot be split into a compiler and its arguments ({err}); "
                        f"correct its quotes or unset CC")
    else:
        if not compiler or shutil.which(compiler[0]) is None:
            _FAILURE.append(f"no C compiler {os.environ.get('CC') or 'cc'!r} on PATH (set CC to one)")
        else:
            errors, wrong_numbers = [], False
            for flags in flag_sets():
                try:
                    library = _open(_build(compiler, flags))
                    wrong = self_check({dtype: Kernel(library, dtype) for dtype in (torch.float32, torch.float64)})
                except (OSError, RuntimeError, subprocess.SubprocessError) as err:
                    errors.append(str(err))
                    wrong_numbers |= isinstance(err, RoundingModeChanged)
                    continue
                if wrong is None:
                    _BUILT.update(compiler=shlex.join(compiler), flags=" ".join(flags))
                    return library
                errors.append(f"{' '.join(compiler + list(flags))} compiled it, but {wrong}")
                wrong_numbers = True
            _FAILURE.append("compiling or loading it failed: " + "; ".join(errors) + (
                "; a compiler or flags (in CC) that relax IEEE arithmetic, such as -ffast-math, do this: "
                "remove them from CC" if wrong_numbers else ""))
    warnings.warn(f"gmp: the compiled hyperspherical map is unavailable ({_FAILURE[0]}); GmP layers use the "
                  "torch map on the CPU instead, about 2.5 times slower. GMP_NATIVE=0 silences this.",
                  RuntimeWarning)
    return None


class Kernel:
    """The compiled map for one dtype (float32 or float64)."""

    def __init__(self, library: ctypes.CDLL, dtype: torch.dtype):
        self.dtype = dtype
        name = str(dtype).removeprefix("torch.")
        self._forward = getattr(library, f"{name}_forward")
        self._backward = getattr(library, f"{name}_backward")
        for fn in (self._forward, self._backward):
            fn.restype = ctypes.c_int

    def forward(self, theta: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """``scale[:, None] * u(theta)`` for contiguous CPU tensors ``theta`` (m, k) and ``scale`` (m,) of this dtype."""
        self._check(theta, scale)
        m, k = theta.shape
        weight = theta.new_empty(m, k + 1)
        _check(self._forward(ctypes.c_ssize_t(m), ctypes.c_ssize_t(k), ctypes.c_void_p(scale.data_ptr()),
                             ctypes.c_void_p(theta.data_ptr()), ctypes.c_void_p(weight.data_ptr()),
                             ctypes.c_int(_threads(m, k))))
        return weight

    def backward(self, theta: torch.Tensor, scale: torch.Tensor,
                 grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The gradients of the angles and the scales for the upstream gradient ``grad`` (m, k + 1)."""
        self._check(theta, scale)
        m, k = theta.shape
        grad = grad.contiguous()
        if grad.shape != (m, k + 1) or grad.dtype != self.dtype or grad.device.type != "cpu":
            raise ValueError(f"expected a {self.dtype} CPU gradient of shape {(m, k + 1)}, "
                             f"got {grad.dtype} {tuple(grad.shape)} on {grad.device}")
        grad_theta, grad_scale = theta.new_empty(m, k), theta.new_empty(m)
        _check(self._backward(ctypes.c_ssize_t(m), ctypes.c_ssize_t(k), ctypes.c_void_p(scale.data_ptr()),
                              ctypes.c_void_p(theta.data_ptr()), ctypes.c_void_p(grad.data_ptr()),
                              ctypes.c_void_p(grad_theta.data_ptr()), ctypes.c_void_p(grad_scale.data_ptr()),
                              ctypes.c_int(_threads(m, k))))
        return grad_theta, grad_scale

    def _check(self, theta: torch.Tensor, scale: torch.Tensor) -> None:
        """The kernel reads raw memory: refuse what it would misread."""
        for name, x, dim in (("theta", theta, 2), ("scale", scale, 1)):
            if x.dim() != dim or x.dtype != self.dtype or x.device.type != "cpu" or not x.is_contiguous():
                raise ValueError(f"{name} must be a contiguous {self.dtype} CPU tensor with {dim} dimension(s), "
                                 f"got {x.dtype} {tuple(x.shape)} on {x.device} (contiguous: {x.is_contiguous()})")
        if scale.shape[0] != theta.shape[0]:
            raise ValueError(f"expected one scale per row of theta ({theta.shape[0]}), got {scale.shape[0]}")


def _threads(m: int, k: int) -> int:
    """Threads for ``m`` rows of ``k`` angles: at most torch's, one per :data:`ANGLES_PER_THREAD` angles."""
    return max(1, min(torch.get_num_threads(), m, m * k // ANGLES_PER_THREAD))


def _check(code: int) -> None:
    if code != 0:
        raise MemoryError("the compiled hyperspherical map could not allocate its scratch rows")


@functools.cache
def _load() -> tuple[dict[torch.dtype, Kernel], bool]:
    library = _library()
    if library is None:
        return {}, False
    return {dtype: Kernel(library, dtype) for dtype in (torch.float32, torch.float64)}, bool(library.openmp())


def _loaded() -> tuple[dict[torch.dtype, Kernel], bool]:
    with _LOCK:  # one build, and one warning, when threads ask at once
        return _load()


def kernel(theta: torch.Tensor) -> Kernel | None:
    """The compiled map for ``theta``'s dtype when ``theta`` is a float32 or float64 CPU tensor and
    the kernel compiles and loads here; else None (see :func:`unavailable`)."""
    if theta.device.type != "cpu":
        return None
    return _loaded()[0].get(theta.dtype)


def unavailable() -> str | None:
    """Why the compiled map is not used on this machine, or None when it is."""
    _loaded()
    return _FAILURE[0] if _FAILURE else None


def threaded() -> bool:
    """Whether the compiled map splits its rows among threads (it was built with OpenMP)."""
    return _loaded()[1]


def describe() -> dict[str, str]:
    """What computes the hyperspherical map on the CPU in this process, as a run's provenance records
    it: ``{"map": "compiled", "compiler": ..., "version": ..., "flags": ...}`` (a library built with
    that command and flags, and found equal to the torch map by :func:`self_check`), or
    ``{"map": "torch", "why": ...}`` (:func:`unavailable`)."""
    why = unavailable()
    if why:
        return {"map": "torch", "why": why}
    return {"map": "compiled", **_BUILT, "version": _version(_BUILT["compiler"])}


@functools.cache
def _version(compiler: str) -> str:
    """The first line the compiler ``compiler`` prints for ``--version`` (empty when it prints none)."""
    try:
        done = subprocess.run([*shlex.split(compiler), "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    return next(iter(done.stdout.splitlines()), "")
