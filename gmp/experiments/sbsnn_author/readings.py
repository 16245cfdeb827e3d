"""The chapter's numbers as prose, each a sentence or a clause that the page glues in (``gmp.results.glue``):
what the paper-scale run (or this build's) measured, and what the claims' rules make of it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from gmp.activations import ACTIVATION_TEXT
from gmp.results import paired_interval

from .claims import ANY_VALUES_BAR, GENERALISATION_MASKS, heldout_intervals
from .figures import label
from .payload import same_image_siren
from .protocol import (ANY_VALUES, HELDOUT_NETS, MINIBATCH_ARM, PAPER, PLATEAU_NETWORKS, PSNR_TARGETS,
                       REVERSE_ABLATION, SBSNN_FAMILY, SBSNN_HELDOUT, TEXT_ARM, TEXT_HELDOUT)
from .seeds import seed_margins


def heldout_reading(held: Mapping[str, Any] | None) -> str:
    """The held-out PSNRs of :func:`~gmp.experiments.sbsnn_author.payload.heldout_summary`'s payload ``held`` as
    prose."""
    if not held:
        return "not yet run."
    nets = held["networks"]
    return ("; ".join(f"{prose} {nets[k]['train_psnr']:.1f} dB on its training pixels, {nets[k]['heldout_psnr']:.1f} "
                      f"dB on the held-out ones" for k, (_, _, prose) in HELDOUT_NETS.items() if k in nets)
            + "; interpolating the held-out pixels: "
            + ", ".join(f"{m} {held['interpolation'][m]:.1f} dB" for m in ("nearest", "linear", "cubic")) + ".")


def passes_reading(payload: Mapping[str, Any] | None) -> str:
    """The abstract's "1/100th" in passes over the pixels and in Adam updates, against SIREN on the same image."""
    siren = same_image_siren(payload)
    if siren is None:
        return "not yet measured: the paper-scale cache predates the same-image SIREN's pass count."
    rows, reference = payload["rows"], siren["passes"]["siren"]
    parts = []
    for activation in SBSNN_FAMILY:
        row = rows.get(f"{activation}/rotated")
        if row is None:
            continue
        reach = row["reach"]["siren-train"]
        name = ACTIVATION_TEXT[activation]
        parts.append(f"{name} never within its {row['epochs']} epochs" if reach["epochs"] is None else
                     f"{name} after {reach['epochs']} passes (1/{reference / reach['epochs']:.0f} of SIREN's) and "
                     f"{reach['updates']:,} Adam updates ({reach['updates'] / reference:.0f} times SIREN's)")
    if reference is None:
        return "SIREN under its own protocol never reached 56.0 dB on the author's file."
    held = payload["heldout"]["networks"]
    matched = [f"{HELDOUT_NETS[k][2]} after {held[k]['reach']['siren']} passes "
               f"(1/{reference / held[k]['reach']['siren']:.0f} of SIREN's)" for k in ("script", "sin_rotated")
               if k in held and held[k]["reach"]["siren"] is not None]
    return (f"SIREN under its own protocol reaches 56.0 dB on the author's file (its kept "
            f"{siren['kept_pixels']:,} pixels) after {reference:,} passes, one update each. The rotated-encoder "
            f"SBSNN networks of Fig. 7 reach it on the whole image: " + "; ".join(parts) + "."
            + (f" Fitted to the same kept pixels as SIREN: {', '.join(matched)}." if matched else ""))


def nearest_reading(payload: Mapping[str, Any] | None) -> str:
    """The aliasing-encoder networks' held-out PSNR over every held-out mask against nearest-neighbour interpolation
    of the kept pixels, the crudest interpolation there is."""
    if not (payload or {}).get("heldout"):
        return "the held-out fits have not run yet"
    masks = [payload["heldout"], *payload.get("heldout_more", [])]
    nets = [m["networks"][k]["heldout_psnr"] for m in masks for k in SBSNN_HELDOUT if k in m["networks"]]
    nearest = [m["interpolation"]["nearest"] for m in masks]
    below = all(m["networks"][k]["heldout_psnr"] < m["interpolation"]["nearest"] for m in masks
                for k in SBSNN_HELDOUT if k in m["networks"])
    return (f"on the held-out pixels of {len(masks)} mask{'s' * (len(masks) != 1)} the aliasing-encoder networks reach "
            f"{min(nets):.1f} to {max(nets):.1f} dB, against {min(nearest):.1f} to {max(nearest):.1f} dB for "
            f"nearest-neighbour interpolation of the kept pixels: "
            + ("below even nearest-neighbour on every mask" if below else "not below nearest-neighbour on every mask"))


def memorisation_reading(held: Mapping[str, Any] | None) -> str:
    """Whether the fitted SBSNN networks beat linear interpolation of the kept pixels on the held-out ones."""
    if not held:
        return "not yet run."
    linear = held["interpolation"]["linear"]
    nets = {k: held["networks"][k]["heldout_psnr"] for k in ("script", "sin_rotated") if k in held["networks"]}
    below = [k for k, v in nets.items() if v < linear]
    verdict = ("every fitted SBSNN network falls below linear interpolation of the kept pixels on this mask"
               if len(below) == len(nets) else
               "not every fitted SBSNN network falls below linear interpolation of the kept pixels on this mask")
    own = held["networks"].get("siren_own")
    siren = "" if own is None else (f"; SIREN under its own protocol reaches {own['heldout_psnr']:.1f} dB, "
                                    + ("above" if own["heldout_psnr"] > linear else "not above") + " it")
    return (", ".join(f"{HELDOUT_NETS[k][2]} {v:.1f} dB" for k, v in nets.items())
            + f" on the held-out pixels against linear interpolation's {linear:.1f} dB: {verdict}{siren}")


def generalisation_reading(payload: Mapping[str, Any] | None) -> str:
    """The generalisation claim's numbers as prose: per fitted SBSNN network, its held-out PSNR minus linear
    interpolation's over the held-out masks (:func:`~gmp.experiments.sbsnn_author.claims.heldout_intervals`), and what
    the rule makes of them."""
    if not (payload or {}).get("heldout"):
        return "The held-out fits have not run yet."
    masks, intervals = heldout_intervals(payload)
    seeds = ", ".join(str(m["heldout_seed"]) for m in masks)
    if len(masks) < GENERALISATION_MASKS:
        return (f"This rests on {len(masks)} held-out mask{'s' if len(masks) != 1 else ''} (seed {seeds}): the "
                f"generalisation claim is inconclusive until the fits have run on at least {GENERALISATION_MASKS}.")
    parts = ", ".join(f"{HELDOUT_NETS[k][2]} {mean:+.1f} dB (95% interval {low:+.1f} to {high:+.1f})"
                      for k, (mean, low, high) in intervals.items())
    if all(high < 0 for _, _, high in intervals.values()):
        verdict = "every network lies below linear interpolation beyond noise (the rule's \"not reproduced\")"
    elif all(low > 0 for _, low, _ in intervals.values()):
        verdict = "every network lies above linear interpolation beyond noise (the rule's \"reproduced\")"
    else:
        verdict = "the intervals do not put every network on one side of linear interpolation"
    return (f"Over {len(masks)} held-out masks (seeds {seeds}), held-out PSNR minus linear interpolation's: "
            f"{parts}; {verdict}.")


def text_encoder_reading(payload: Mapping[str, Any] | None) -> str:
    """The held-out fits of the text's band-limited encoder under the author's mini-batch epochs: per mask, its
    held-out PSNR minus linear interpolation's, paired over the masks with its 95% interval."""
    masks = [m for m in [(payload or {}).get("heldout"), *(payload or {}).get("heldout_more", [])]
             if m and TEXT_HELDOUT in m["networks"]]
    if not masks:
        return "The held-out fits with the text's encoder have not run yet."
    differences = [m["networks"][TEXT_HELDOUT]["heldout_psnr"] - m["interpolation"]["linear"] for m in masks]
    mean, low, high = paired_interval(differences)
    side = ("above" if low > 0 else "below" if high < 0 else "not separated from") + " linear interpolation"
    return (f"The same sin network with the text's band-limited encoder (and the sine layer that widens it) under "
            f"the author's mini-batch epochs, on the same {len(masks)} mask{'s' if len(masks) != 1 else ''}: held-out "
            f"PSNR minus linear interpolation's {mean:+.1f} dB"
            + (f" (95% interval {low:+.1f} to {high:+.1f})" if math.isfinite(low) else "")
            + f", {side}; on its training pixels it reaches {np.mean([m['networks'][TEXT_HELDOUT]['train_psnr'] for m in masks]):.1f} dB.")


def higher_accuracy_reading(payload: Mapping[str, Any] | None) -> str:
    """The plateau runs of :data:`~gmp.experiments.sbsnn_author.protocol.PLATEAU_NETWORKS` (the abstract's "to higher
    accuracy") as a sentence."""
    runs = (payload or {}).get("plateau") or {}
    if any(name not in runs for name in PLATEAU_NETWORKS):
        return ("These runs have not run yet: they are queued for the prepared GPU command (QUEUED), and the claim "
                "reads \"not yet run\" until they are journalled and assembled.")
    return (f"At their plateau the best whole-image PSNRs are: SIREN under its own protocol {runs['siren']['best_train_psnr']:.1f} "
            f"dB; " + ", ".join(f"{ACTIVATION_TEXT[name]} {runs[name]['best_train_psnr']:.1f} dB" for name in SBSNN_FAMILY)
            + ".")


def any_values_reading(payload: Mapping[str, Any] | None) -> str:
    """The script's network fitted to the image and to each assignment of
    :data:`~gmp.experiments.sbsnn_author.protocol.ANY_VALUES`, in the any-values claim's unit (passes to
    :data:`~gmp.experiments.sbsnn_author.claims.ANY_VALUES_BAR`), as a clause."""
    arms = (payload or {}).get("any_values") or {}
    image = (payload or {}).get("rows", {}).get("script/aggressive")
    if len(arms) < len(ANY_VALUES) or image is None:
        return "whether it fits other assignments of values as it fits the image has not been run yet"

    def reached(row: Mapping[str, Any]) -> str:
        passes = row["reach"]["author-train"]["epochs"]
        return (f"reaches {ANY_VALUES_BAR:.0f} dB at pass {passes}" if passes is not None else
                f"does not reach {ANY_VALUES_BAR:.0f} dB in its {row['epochs']} passes")

    fitted = [arm for arm, row in arms.items() if row["reach"]["author-train"]["epochs"] is not None]
    outcome = ("it fits every one of these assignments to that accuracy, as it fits the image" if len(fitted) == len(arms)
               else "it fits neither assignment to that accuracy in these passes and under this schedule, so its speed "
                    "on the image rests on the image's own structure, not on a lookup of arbitrary values" if not fitted
               else f"of these assignments it fits only {' and '.join(ANY_VALUES[a] for a in fitted)} to that accuracy")
    return (f"fitted as in the README's aggressive run, the script's network {reached(image)} on the image (best "
            f"{image['best_train_psnr']:.1f} dB); on " + "; on ".join(
                f"{ANY_VALUES[arm]} it {reached(row)} (best {row['best_train_psnr']:.1f} dB, where predicting their "
                f"mean gives {row['mean_db']:.1f} dB)" for arm, row in arms.items()) + f": {outcome}")


def readme_reading(payload: Mapping[str, Any] | None) -> str:
    """The README's two runs against their bars: the epoch at which each passes and its margin at the end."""
    rows = (payload or {}).get("rows", {})
    parts = []
    for schedule in ("aggressive", "less_aggressive"):
        row = rows.get(f"script/{schedule}")
        if row is None:
            continue
        db, epochs = PAPER[f"readme_{schedule}_db"], PAPER[f"readme_{schedule}_epochs"]
        at = row["reach_readme"]["epoch"]["epochs"]
        parts.append(f"the {schedule.replace('_', ' ')} schedule's bar of {db:g} dB in {epochs} epochs "
                     + (f"is passed at epoch {at}" if at is not None else "is not reached")
                     + f", and the best epoch-mean PSNR is {row['best_epoch_psnr']:.1f} dB, "
                       f"{row['best_epoch_psnr'] - db:+.1f} dB from it")
    if not parts:
        return "not yet run."
    out = "; ".join(parts) + ", in seed 0's runs."
    for schedule in ("aggressive", "less_aggressive"):
        db = PAPER[f"readme_{schedule}_db"]
        margins = seed_margins(payload or {}, f"script/{schedule}", "best_epoch_psnr", db)
        if margins is None:
            out += f" The {schedule.replace('_', ' ')} schedule rests on that one seed (provisional)."
            continue
        mean, low, high = paired_interval(margins)
        out += (f" Over {len(margins)} seeds the {schedule.replace('_', ' ')} schedule's best epoch-mean PSNR is "
                f"{db + mean:.1f} dB on average, {mean:+.1f} dB from its bar (95% interval {low:+.1f} to {high:+.1f}); "
                f"{sum(m >= 0 for m in margins)} of {len(margins)} seeds pass it.")
    return out


TRAINED_DB = 30.0
"""The best whole-image PSNR in dB on the [0, 1] scale that a SIREN arm must reach to count as trained.

Below it the image is a blur.

SIREN under its own protocol reaches 56 dB; every SBSNN of Fig. 4 passes 36 dB. Set after the
paper-scale run showed the first two mini-batch SIREN arms (its own rate, the figure's schedule)
peaking at 18 to 19 dB.
"""


def ablation_untrained(payload: Mapping[str, Any] | None) -> str:
    """The ablation's full-batch steps: the range of their final PSNRs, whether they all end untrained (below
    the bar of :data:`TRAINED_DB`), and the last step's."""
    rows = (payload or {}).get("ablation") or []
    full = [r for r in rows if r["updates"] == r["epochs"]]  # one update per iteration: a full batch
    last = [r for r in rows if r["updates"] > r["epochs"]]
    if not full:
        return "The paper-scale ablation has not run yet."
    top = max(r["final_psnr"] for r in full)
    out = (f"The {len(full)} full-batch steps end between {min(r['final_psnr'] for r in full):.1f} and {top:.1f} dB "
           f"after their {full[0]['epochs']} updates: "
           + (f"none has trained (reached {TRAINED_DB:g} dB)." if top < TRAINED_DB else
              f"not all of them untrained (below {TRAINED_DB:g} dB)."))
    if last:
        out += f" The mini-batch step ends at {last[-1]['final_psnr']:.1f} dB."
    return out


def reverse_reading(payload: Mapping[str, Any] | None) -> str:
    """What the reverse ablation separates: the arms whose paired difference from the author's protocol has a
    95% interval below 0 (the setting matters), above 0 (the fit is better without it) or containing 0 (not
    separated)."""
    rows = [r for r in (payload or {}).get("reverse", []) if r.get("difference")]
    base = next((r for r in (payload or {}).get("reverse", []) if r["arm"] == 0), None)
    if not rows or base is None:
        return "The reverse ablation has not run yet."

    def item(r: Mapping[str, Any]) -> str:
        mean, low, high = r["difference"]
        return f"{r['name'].removeprefix('− ')}: {mean:+.1f} dB ({low:+.1f} to {high:+.1f})"

    separated = [r for r in rows if r["difference"][1] > 0 or r["difference"][2] < 0]
    level = [r for r in rows if r not in separated]
    out = (f"Over seeds {', '.join(map(str, base['seeds']))}, the author's protocol ends at {base['mean_psnr']:.1f} dB "
           f"on average. ")
    if separated:
        out += ("Taking away a setting moves the PSNR beyond the seeds' noise (the 95% interval of the paired "
                "difference excludes 0) for " + "; ".join(item(r) for r in separated) + ". ")
    if level:
        out += "These seeds do not separate from the author's protocol " + "; ".join(item(r) for r in level) + "."
    return out.strip()


def why_reading(payload: Mapping[str, Any] | None) -> str:
    """What the reverse ablation says makes the fit fast, in the unit of the claim: the passes over the pixels each
    arm's seeds need to reach SIREN's accuracy (56.0 dB whole-image), every arm with its paired difference from the
    author's protocol and its 95% interval, what three seeds can tell apart (the interval's half-width), and the
    settings without which a seed never gets there; a setting is called needed only where the seeds show it."""
    reverse = {r["arm"]: r for r in (payload or {}).get("reverse", [])}
    if 0 not in reverse or MINIBATCH_ARM not in reverse or TEXT_ARM not in reverse or "passes" not in reverse[0]:
        return "The reverse ablation has not run yet."
    base, target = reverse[0], PSNR_TARGETS["siren"]

    def counts(row: Mapping[str, Any]) -> str:
        return "/".join("never" if p is None else str(p) for p in row["passes"])

    def item(row: Mapping[str, Any]) -> str:
        diff = row.get("passes_difference")
        return (f"taking away {row['name'].removeprefix('− ')}: {counts(row)}"
                + ("" if diff is None else f" ({diff[0]:+.0f} passes, 95% interval {diff[1]:+.0f} to {diff[2]:+.0f})"))

    arms = [reverse[arm] for arm in sorted(reverse) if arm]
    out = (f"In passes over the pixels to {target:.1f} dB (SIREN's accuracy, whole image; seeds "
           f"{', '.join(map(str, base['seeds']))}; never: not within the run), the author's protocol needs "
           f"{counts(base)}; " + "; ".join(item(r) for r in arms) + ".")
    never = [r for r in arms if None in r["passes"] and "encoder" not in REVERSE_ABLATION[r["arm"]]]
    slower = [r for r in arms if r.get("passes_difference") and r["passes_difference"][1] > 0
              and "encoder" not in REVERSE_ABLATION[r["arm"]]]
    def names(rows: list[Mapping[str, Any]]) -> str:
        return " or ".join(r["name"].removeprefix("− ").split(" (")[0] for r in rows)

    if never:
        out += f" Taking away {names(never)}, not every seed gets there within the run."
    if slower:
        out += f" Taking away {names(slower)}, the fit is slower beyond the seeds' noise."
    encoders = [r for r in arms if "encoder" in REVERSE_ABLATION[r["arm"]]]
    decided = [r for r in encoders if r.get("passes_difference")]
    n = len(base["seeds"])
    if decided:
        widths = ", ".join(f"±{(r['passes_difference'][2] - r['passes_difference'][1]) / 2:.0f} passes "
                           f"({r['name'].removeprefix('− the aliasing encoder ').strip('()')})" for r in decided)
        out += (f" With {n} seeds a paired 95% interval is the seeds' spread times {_t_factor(n):.2f}/√{n}: here "
                f"{widths}, so a difference in speed smaller than that cannot be told from noise.")
    level = [r for r in decided if r["passes_difference"][1] <= 0 <= r["passes_difference"][2]]
    if encoders and len(level) == len(encoders):
        out += (" In passes, neither arm without the aliasing encoder separates from the author's protocol: these "
                "seeds show neither that his encoder is needed for the speed nor that it is not.")
    elif any(r["passes_difference"][1] > 0 for r in decided) or any(None in r["passes"] for r in encoders):
        out += " Without the aliasing encoder the fit is slower in passes beyond these seeds' noise."
    lower = [r for r in encoders if r.get("difference") and r["difference"][2] < 0]
    if lower:
        out += (" After the run's last pass, " + "; ".join(
            f"taking away {r['name'].removeprefix('− ')} leaves the PSNR {r['difference'][0]:+.1f} dB from his "
            f"(95% interval {r['difference'][1]:+.1f} to {r['difference'][2]:+.1f}), beyond noise" for r in lower) + ".")
    return out


def _t_factor(n: int, level: float = 0.95) -> float:
    """The two-sided Student-t quantile that a paired interval over ``n`` seeds multiplies the spread by."""
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, n - 1))


def reading(payload: Mapping[str, Any]) -> str:
    """The paper-scale (or this build's) numbers that decide the claims, as prose."""
    rows = payload["rows"]
    parts = []
    for schedule in ("aggressive", "less_aggressive"):
        row = rows.get(f"script/{schedule}")
        if row:
            at = row["reach_readme"]["epoch"]["epochs"]
            db = PAPER[f"readme_{schedule}_db"]
            parts.append(f"the script's network with the {schedule.replace('_', ' ')} schedule reaches "
                         + (f"{db:g} dB (epoch-mean) at epoch {at}" if at else f"at best {row['best_epoch_psnr']:.1f} dB "
                            f"(epoch-mean) in {row['epochs']} epochs")
                         + f", {row['best_train_psnr']:.1f} dB by the whole image")
    for name in [f"{a}/rotated" for a in SBSNN_FAMILY]:
        row = rows.get(name)
        if row:
            reach = row["reach"]["siren-train"]
            parts.append(f"{label(name)} " + (f"passes 56.0 dB (whole image) at epoch {reach['epochs']}, after "
                                              f"{reach['updates']:,} Adam updates" if reach["epochs"] else
                                              f"peaks at {row['best_train_psnr']:.1f} dB (whole image) in {row['epochs']} "
                                              f"epochs"))
    full = rows.get("siren/fullbatch")
    if full:
        step = full["first_below_siren_target"]
        parts.append("SIREN under its own protocol " + (f"passes 56.0 dB at update {step:,}" if step is not None else
                                                        f"peaks at {full['best_psnr']:.1f} dB in {full['steps']:,} updates"))
    return ("; ".join(parts) + ".") if parts else "no fit has finished yet."
