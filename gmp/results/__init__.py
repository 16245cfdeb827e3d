"""Cached results with provenance, and the claims of the papers with their rules.

Layout, for a chapter ``book/<part>/<chapter>.md`` run at some scale::

    book/_results/<chapter>/<scale>/
        provenance.json     commit, versions, device, date, wall time, config and its digest,
                            the code fingerprint (per-module hashes of gmp), and the
                            sha256 of every other file of the folder
        <name>.json         one payload per result (plain JSON)
        <name>.npz          optional arrays beside it
        <chapter>.ipynb     the notebook as papermill executed it (kept locally, not committed)

Only ``python -m gmp.runs`` writes there: it sets ``GMP_RESULTS_STAGING`` to a private
folder, the chapter's :meth:`Store.save` calls write into it, and the runner moves it into
place when the run succeeds. A chapter built by Jupyter Book, or opened in Colab, only
reads. A cached result whose config digest differs from the chapter's current config is
reported as stale, and one whose files fail their hashes or cannot be read as corrupt,
never as current. One computed by gmp code that has changed since stays current, and says
in which modules the code changed (:func:`code_fingerprint`), or that a module was rewritten
without changing what it computes, and why that is known (:data:`SAME_FUNCTION`), or that the
code was refactored and today's code re-verified on a stated sample of the cache's units
(``python -m gmp.runs CHAPTER --scale S --restamp``, recorded in provenance.json).

The package, one concern a module, each importing only those before it:

- :mod:`gmp.results.files`: where the cache lives, and files written whole or not at all;
- :mod:`gmp.results.fingerprint`: which code computed a result, and whether today's code still would;
- :mod:`gmp.results.claims`: the papers' claims, their rules and verdicts, and the statistics they decide by;
- :mod:`gmp.results.journal`: the finished units of an unfinished run, from which it resumes;
- :mod:`gmp.results.cache`: reading a cache, checked, and the note a page shows of it;
- :mod:`gmp.results.store`: :class:`Store`, where a chapter saves its results and journals its units;
- :mod:`gmp.results.verdicts`: the claims ledger, judging every claim on its cache, and the verdict boxes,
  claim tables and ledger that chapters call as ``gmp.results.<name>``.

Every name is exported here, where chapters and the rest of gmp import it from. A module calls what a test
may stand in for (``results_root``, ``repository_root``, ``code_fingerprint``, ``code_edited``,
``experiment_chapters``) through the module that defines it, so a test patches it there
(``monkeypatch.setattr(gmp.results.files, "results_root", ...)``) and reaches every caller in the package.
"""

from gmp.results.files import (RESULTS_PATH, ROOT_ENV, STAGING_ENV, _npz_bytes, atomic_write_bytes,
                               atomic_write_json, replace_folder, repository_root, results_root)
from gmp.results.fingerprint import (CODE_HASH, PACKAGE, RENDERING, SAME_FUNCTION, SAME_FUNCTION_FILE, SameFunction,
                                     _file_stats, _imported, _syntax_digest, _tree, chapter_modules, changed_modules,
                                     code_against, code_edited, code_fingerprint, experiment_source, journal_code,
                                     module_digests, read_module_hashes, read_same_function, resumed_code,
                                     same_function, with_code)
from gmp.results.claims import (CHECK, CONFIDENCE, CORRUPT, FAILS, FINDING, IDENTITY, IDENTITY_VERDICTS,
                                INCONCLUSIVE, KIND_VERDICTS, NOT_REPRODUCED, NOT_RUN, PAPER, PAPERS, PARTLY,
                                REPRODUCED, RULE_HASH, SIGN_LEVEL, SOURCES, STALE, SUPERSEDED, VERDICTS, VERIFIED,
                                Claim, EarlierDesign, EarlierRule, NotYetRun, PowerTest, _claims_of, experiment_chapters,
                                paired_interval, rule_digest, rule_digests, sign_test)
from gmp.results.journal import (append_journal, carried_units, carry, entry_problem, journal_entries,
                                 journal_path, journal_units)
from gmp.results.cache import (SNAPSHOT_TRIES, Cached, CorruptCache, _units_code_text, cached, glue, missing_cell,
                               payload_hashes, restamp_text)
from gmp.results.store import BUSY, RUN_CODE, RUN_USED, Store, fcntl, read_run_records, run_code
from gmp.results.verdicts import _judged, claims_table, ledger, verdict_box

