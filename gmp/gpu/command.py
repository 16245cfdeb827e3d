"""``python -m gmp.gpu OUT``: the command of one lease, and its ``merge``, ``units`` and ``stacked`` forms."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from gmp.runs import dash_values

from .chapters import smoke
from .files import environment, return_problems, within_return_limits, write_json
from .lu_real import load_group, train_group
from .returned import merge
from .units import STACKED_CHAPTERS, UNIT_CHAPTERS, compute_units, compute_units_stacked, stacked_units_job, units_job


def _device(text: str) -> str:
    """A device torch can name (``cuda``, ``cuda:1``, ``cpu``): a misspelt one failed each unit inside, exiting 0."""
    try:
        torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"{text!r} is no device torch knows: use cuda, cuda:N or cpu") from None
    return text


def _networks(text: str) -> int:
    """A number of networks per group, an integer >= 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a number of networks, an integer >= 1, got {text!r}")
    return int(text)


def _seconds(text: str) -> float:
    """A time budget of the command line: a finite number of seconds > 0 (NaN would set no deadline at all)."""
    value = _seconds_or_none(text)
    if value == 0:
        raise argparse.ArgumentTypeError("a time budget is a number of seconds > 0, got 0: nothing would run")
    return value


def _lease_seconds(text: str) -> float:
    """The lease form's deadline: more than the 30 s it keeps at the end to write its journal and summary."""
    value = _seconds(text)
    if value <= 30:
        raise argparse.ArgumentTypeError(f"the lease keeps its last 30 s to write what it did, so it must be more "
                                         f"than 30 s, got {text!r}: nothing could run")
    return value


def _folder(text: str) -> Path:
    """A folder the command writes in: a path that is a file failed with a traceback after the group had trained."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder: name a folder (it is made if missing)")
    return path


def _seconds_or_none(text: str) -> float:
    """A number of seconds >= 0, finite."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, got {text!r}") from None
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"a finite number of seconds >= 0, got {text!r} (a NaN or infinite deadline "
                                         "would never stop the command, a negative one would run nothing)")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["units"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu units", description=compute_units.__doc__.split("\n")[0])
        parser.add_argument("out", type=_folder)
        parser.add_argument("chapter", choices=UNIT_CHAPTERS)
        parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
        parser.add_argument("--device", default="cuda", type=_device)
        parser.add_argument("--seconds", type=_seconds, required=True, help="time until the deadline")
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args(dash_values(parser, argv[1:]))
        write_json(args.out / "gpu.json", environment(args.device))  # what merge reads the units' device from
        compute_units(args.out, args.chapter, args.scale, args.device, time.monotonic() + args.seconds, args.seed)
        return 0
    if argv[:1] == ["stacked"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu stacked",
                                         description=compute_units_stacked.__doc__.split("\n")[0])
        parser.add_argument("out", type=_folder)
        parser.add_argument("chapters", nargs="+", choices=STACKED_CHAPTERS)
        parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
        parser.add_argument("--device", default="cuda", type=_device)
        parser.add_argument("--seconds", type=_seconds, required=True, help="time until the deadline")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--probe-only", action="store_true", help="predict each queue's time; train nothing")
        args = parser.parse_args(dash_values(parser, argv[1:]))
        write_json(args.out / "gpu.json", environment(args.device))
        compute_units_stacked(args.out, args.chapters, args.scale, args.device, time.monotonic() + args.seconds,
                              args.seed, args.probe_only)
        return 0
    if argv[:1] == ["lease"]:
        from .lease import STATE, lease

        parser = argparse.ArgumentParser(prog="python -m gmp.gpu lease", description=lease.__doc__.split("\n")[0])
        parser.add_argument("out", type=_folder, help="the folder whose contents come back (e.g. $OUT)")
        parser.add_argument("--seconds", type=_lease_seconds, default=570,
                            help="this command's deadline (default 570; more than the 30 s it keeps to write)")
        parser.add_argument("--lease-seconds", type=_lease_seconds, default=None,
                            help="device time the lease has left as this command starts (default: --seconds); a "
                                 "group that needs more than this command saves its state for the next")
        parser.add_argument("--state", type=_folder, default=STATE, help="the state folder (default _gpu_state/)")
        parser.add_argument("--measure-seconds", type=_seconds_or_none, default=60,
                            help="budget of OUT/measure.json (default 60; 0 skips it)")
        parser.add_argument("--smoke-seconds", type=_seconds_or_none, default=110,
                            help="budget of the smoke run (default 110; 0 skips it)")
        parser.add_argument("--device", default="cuda", type=_device)
        parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
        parser.add_argument("--networks", type=_networks, default=None, help="networks of the group (default: what fits)")
        parser.add_argument("--seed", type=int, default=0)
        args = parser.parse_args(dash_values(parser, argv[1:]))
        if args.lease_seconds is not None and args.lease_seconds < args.seconds:
            parser.error(f"--lease-seconds {args.lease_seconds:g} is less than --seconds {args.seconds:g}: the machine "
                         "goes back before this command's deadline; give --seconds at most the lease's time")
        return lease(args.out, args.seconds, args.lease_seconds, args.state, args.measure_seconds, args.smoke_seconds,
                     args.device, args.scale, args.networks, args.seed)
    if argv[:1] == ["merge"]:
        parser = argparse.ArgumentParser(prog="python -m gmp.gpu merge", description=merge.__doc__.split("\n")[0])
        parser.add_argument("out", type=Path)
        args = parser.parse_args(dash_values(parser, argv[1:]))
        try:
            added = merge(args.out)
        except ValueError as err:
            print(f"python -m gmp.gpu merge: {err}", file=sys.stderr)
            return 1
        print(f"added {len(added)} journal entries")
        return 0
    parser = argparse.ArgumentParser(prog="python -m gmp.gpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=_folder, help="the folder whose contents come back (e.g. $OUT)")
    parser.add_argument("--seconds", type=_seconds, default=530, help="the whole command's deadline (default 530)")
    parser.add_argument("--smoke-seconds", type=_seconds, default=110, help="budget of the chapters' smoke run")
    parser.add_argument("--device", default="cuda", type=_device)
    parser.add_argument("--scale", default="paper", choices=["smoke", "small", "paper"])
    parser.add_argument("--networks", type=_networks, default=None, help="networks per group (default: what fits)")
    parser.add_argument("--skip-smoke", action="store_true")
    parser.add_argument("--chapters", nargs="+", default=None, help="smoke only these chapters (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--units-seconds", type=_seconds_or_none, default=0.0,
                        help="seconds kept from the lu_real group for the Part III units (default 0: what it leaves)")
    parser.add_argument("--units", nargs="*", default=list(UNIT_CHAPTERS), choices=UNIT_CHAPTERS,
                        help="chapters of the second job (default: all of UNIT_CHAPTERS, in its order whatever the "
                             "order given; none to skip it)")
    parser.add_argument("--unit-by-unit", action="store_true",
                        help="the second job without the stacked fit (each unit by itself, resumable)")
    args = parser.parse_args(dash_values(parser, argv))
    begin = time.monotonic()
    deadline = begin + args.seconds - 30  # room to write the journal (one write) and the summary
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    summary: dict[str, Any] = {"environment": environment(args.device)}
    print(json.dumps(summary["environment"], indent=1), flush=True)
    write_json(out / "gpu.json", summary["environment"])
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        summary["error"] = "no CUDA device: nothing run"
        write_json(out / "summary.json", summary)
        print(summary["error"], flush=True)
        return 2
    group = None
    try:  # the run's next group and its data first: missing data stops the command before the smoke run
        from gmp import config

        cfg = config.load("lu_real", args.scale)
        group = load_group(cfg, args.seed)
    except Exception:
        summary["lu_real"] = {"error": traceback.format_exc()[-3000:]}
    if not args.skip_smoke:
        try:
            summary["smoke"] = smoke(out, args.device, args.smoke_seconds, workers=min(8, os.cpu_count() or 1),
                                     chapters=args.chapters)
        except Exception:
            summary["smoke"] = {"error": traceback.format_exc()[-2000:]}
        write_json(out / "summary.json", summary)
    if group is not None:
        try:
            summary["lu_real"] = train_group(out, cfg, args.device, deadline - args.units_seconds, args.seed,
                                             args.networks, group)
        except Exception:
            summary["lu_real"] = {"error": traceback.format_exc()[-3000:]}
        write_json(out / "summary.json", summary)
    full_batch = [chapter for chapter in UNIT_CHAPTERS if chapter in args.units and chapter not in STACKED_CHAPTERS]
    stacked = [chapter for chapter in UNIT_CHAPTERS if chapter in args.units and chapter in STACKED_CHAPTERS]
    for chapters, stack in ((full_batch, False), (stacked, not args.unit_by_unit)):  # UNIT_CHAPTERS says why
        if chapters and stack:
            try:
                summary["units_stacked"] = stacked_units_job(out, chapters, args.scale, args.device, deadline, args.seed)
            except Exception:
                summary["units_stacked"] = {"error": traceback.format_exc()[-3000:]}
            write_json(out / "summary.json", summary)
        if chapters:
            try:
                summary.setdefault("units", {}).update(units_job(out, chapters, args.scale, args.device, deadline,
                                                                 args.seed))
            except Exception:
                summary.setdefault("units", {})[", ".join(chapters)] = {"error": traceback.format_exc()[-3000:]}
            write_json(out / "summary.json", summary)
    summary["seconds"] = round(time.monotonic() - begin, 1)
    write_json(out / "summary.json", summary)
    summary["left_out"] = within_return_limits(out, summary)
    summary["return_problems"] = return_problems(out)
    write_json(out / "summary.json", summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "environment"}, indent=1, default=str), flush=True)
    return 0 if "error" not in summary["lu_real"] else 1
