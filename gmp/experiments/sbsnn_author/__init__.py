"""Experiment of the chapter book/part3/sbsnn_author.md: the SBSNN paper's image fits under its
author's own protocol (his public Keras code), the README's two runs, Fig. 7 in epochs, SIREN
under both protocols on the classic cameraman, and whether the fits represent the image or
memorise its pixels.

The author's protocol: an "iteration" is a Keras epoch, one pass over the pixels in mini-batches of 32; the
targets are the pixel values in [0, 1]; his encoder (his matrices) feeds a network without biases; Keras's Adam
and plateau rule. The paper's accuracy bar, an MSE of 1e-5, is 50 dB on his [0, 1] values and 56.0 dB for
SIREN's MSE of 1e-5 on [-1, 1] values (``PSNR = 10 log10(1 / MSE)`` on [0, 1]).

The package, in the order a reader meets it (each module imports only those before it):

- :mod:`~gmp.experiments.sbsnn_author.protocol`: the author's protocol and the paper's numbers, the book's scales
  of the run (``CONFIG``, and ``QUEUED`` for a GPU), the networks, both ablations' settings in words;
- :mod:`~gmp.experiments.sbsnn_author.runs`: the run as journalled units, and their keys at a scale;
- :mod:`~gmp.experiments.sbsnn_author.payload`: the claims' payload and the cached curves, assembled from the
  journalled units;
- :mod:`~gmp.experiments.sbsnn_author.seeds`: thin-margin verdicts decided over seeds (shared with
  :mod:`gmp.experiments.sbsnn_author_figs`);
- :mod:`~gmp.experiments.sbsnn_author.claims`: the claims tested and their rules;
- :mod:`~gmp.experiments.sbsnn_author.figures`: the figures and the tables beside the paper's numbers;
- :mod:`~gmp.experiments.sbsnn_author.readings`: the numbers as the prose that the page glues in.
"""

from .protocol import (ABLATION, ANY_VALUES, ANY_VALUES_SEED, CONFIG, FIG7_ACTIVATIONS, HELDOUT_NETS, MINIBATCH_ARM,
                       PAPER, PLATEAU_NETWORKS, PSNR_TARGETS, QUEUED, REVERSE_ABLATION, SBSNN_FAMILY, SBSNN_HELDOUT,
                       SCHEDULES, SCRIPT_SIZES, SEED_ROWS, TEXT_ARM, TEXT_HELDOUT, TEXT_LEVELS, ablation_changes,
                       ablation_network, ablation_settings, ablation_setup, any_values_targets, data, encoded,
                       encoder_text, figure_spec, reverse_changes, reverse_settings, script_spec, seeded,
                       settings_setup, siren_spec)
from .runs import (ablation_unit, fit_settings, heldout_text_unit, journalled, render_crop, reverse_unit, run, units,
                   units_keys)
from .payload import (PLATEAU_TAIL, ablation_fits, ablation_summary, any_values_summary, axes, fit_row, fits_of,
                      from_arrays, heldout_summary, interpolation_psnr, plateau_summary, reverse_summary,
                      same_image_siren, seed_fits, seed_rows, summary, to_arrays)
from .seeds import (ONE_SEED, ONE_SEED_REASON, SEEDS_TO_DECIDE, SEED_POWER, SEED_T, THIN_MARGIN, one_seed, over_seeds,
                    seed_margins, seed_rule, seeds_provisional)
from .claims import (ANY_VALUES_BAR, ANY_VALUES_FITTED, CLAIMS, FAMILY_ROTATED, GENERALISATION_MASKS, HELDOUT_MASKS,
                     PLATEAU_GAIN, any_values_at, family_reach, heldout_intervals, kept_pixels_caveat)
from .figures import (SEED_COLUMNS, ablation_table, any_values_table, colour, heldout_table, label, networks_table,
                      plot_axes, plot_photographs, plot_readme, plot_renders, reach_table, reverse_table, seeds_table)
from .readings import (TRAINED_DB, ablation_untrained, any_values_reading, generalisation_reading, heldout_reading,
                       higher_accuracy_reading, memorisation_reading, nearest_reading, passes_reading, reading,
                       readme_reading, reverse_reading, text_encoder_reading, why_reading)

__all__ = ["ABLATION", "ANY_VALUES", "ANY_VALUES_BAR", "ANY_VALUES_FITTED", "ANY_VALUES_SEED", "CLAIMS", "CONFIG",
           "FAMILY_ROTATED", "FIG7_ACTIVATIONS", "GENERALISATION_MASKS", "HELDOUT_MASKS", "HELDOUT_NETS",
           "MINIBATCH_ARM", "ONE_SEED", "ONE_SEED_REASON", "PAPER", "PLATEAU_GAIN", "PLATEAU_NETWORKS", "PLATEAU_TAIL",
           "PSNR_TARGETS", "QUEUED", "REVERSE_ABLATION", "SBSNN_FAMILY", "SBSNN_HELDOUT", "SCHEDULES", "SCRIPT_SIZES",
           "SEEDS_TO_DECIDE", "SEED_COLUMNS", "SEED_POWER", "SEED_ROWS", "SEED_T", "TEXT_ARM", "TEXT_HELDOUT",
           "TEXT_LEVELS", "THIN_MARGIN", "TRAINED_DB", "ablation_changes", "ablation_fits", "ablation_network",
           "ablation_settings", "ablation_setup", "ablation_summary", "ablation_table", "ablation_unit",
           "ablation_untrained", "any_values_at", "any_values_reading", "any_values_summary", "any_values_table",
           "any_values_targets", "axes", "colour", "data", "encoded", "encoder_text", "family_reach", "figure_spec",
           "fit_row", "fit_settings", "fits_of", "from_arrays", "generalisation_reading", "heldout_intervals",
           "heldout_reading", "heldout_summary", "heldout_table", "heldout_text_unit", "higher_accuracy_reading",
           "interpolation_psnr", "journalled", "kept_pixels_caveat", "label", "memorisation_reading",
           "nearest_reading", "networks_table", "one_seed", "over_seeds", "passes_reading", "plateau_summary",
           "plot_axes", "plot_photographs", "plot_readme", "plot_renders", "reach_table", "reading", "readme_reading",
           "render_crop", "reverse_changes", "reverse_reading", "reverse_settings", "reverse_summary", "reverse_table",
           "reverse_unit", "run", "same_image_siren", "script_spec", "seed_fits", "seed_margins", "seed_rows",
           "seed_rule", "seeded", "seeds_provisional", "seeds_table", "settings_setup", "siren_spec", "summary",
           "text_encoder_reading", "to_arrays", "units", "units_keys", "why_reading"]
