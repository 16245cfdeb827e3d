"""Number each figure and table by the paper's own number, not by a running book number.

Every captioned figure or table of the book opens its caption with its number and a colon:
the paper's (``Chen & Ge Fig. 2c: ...``, ``Lu et al. Table 2: ...``) or, for the book's own,
one that says so (``Not in the paper, steps to 60 dB: ...``). This makes that opening the
figure's number: ``{numref}`` links read it, and the running number Sphinx would print before
the caption is left out (``numfig_format`` is ``%s`` and ``gmp.css`` hides the caption's
number, which the caption already opens with, set in bold). A numbered figure whose caption has no such
opening is a build warning, hence an error under ``-W``.
"""

from __future__ import annotations

from docutils import nodes
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: The longest opening taken as a figure's number; a longer one means the colon is in the prose.
MAX_NUMBER = 70


def caption_number(title: str) -> str | None:
    """The number a caption opens with (the text before its first ``": "``), or None."""
    number, colon, _ = title.partition(": ")
    number = number.strip()
    if not colon or not number or len(number) > MAX_NUMBER or "$" in number or "\n" in number:
        return None
    return number


def number_by_caption(app, env) -> list[str]:
    """Replace the running numbers Sphinx assigned with each caption's opening."""
    std = env.get_domain("std")
    for docname, by_type in env.toc_fignumbers.items():
        doctree = env.get_doctree(docname)
        for figtype, numbers in by_type.items():
            for figure_id in numbers:
                node = doctree.ids.get(figure_id)
                title = (std.get_numfig_title(node) or "") if node is not None else ""
                number = caption_number(title)
                if number is None:
                    logger.warning("the caption of %s %r does not open with its number and a colon "
                                   "('Chen & Ge Fig. 2c: ...', 'Not in the paper, ...: ...'): %r",
                                   figtype, figure_id, title[:80], location=(docname, node.line if node else None))
                    continue
                numbers[figure_id] = (number,)
    return []


def bold_numbers(app, doctree, docname) -> None:
    """Set the number a figure's caption opens with in bold."""
    for caption in doctree.findall(nodes.caption):
        if not isinstance(caption.parent, nodes.figure):
            continue
        first = caption.children[0] if caption.children else None
        number = caption_number(caption.astext())
        if number is None or not isinstance(first, nodes.Text) or not str(first).startswith(number + ":"):
            continue
        caption.replace(first, [nodes.strong(text=number + ":"), nodes.Text(str(first)[len(number) + 1:])])


def setup(app):
    app.connect("env-get-updated", number_by_caption, priority=900)
    app.connect("doctree-resolved", bold_numbers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
