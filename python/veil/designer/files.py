"""Design files: what ``veil design`` writes and ``veil load --design`` loads under.

A design file is a physical design (``veil.design.model``) whose server names
are placeholders: the load gives everything fresh names and keys
(``veil.design.fresh``). Before that, the load checks the file against the
source and the client directory's policy, and refuses rather than store
something the policy forbids.
"""

from __future__ import annotations

from veil.design.fresh import fresh_design
from veil.design.model import Column, DesignError, PhysicalDesign
from veil.design.policy import Policy
from veil.designer.candidates import policy_violations


def chosen_design(
    design: PhysicalDesign, schema: dict[str, list[Column]], policy: Policy, fingerprint: str
) -> PhysicalDesign:
    """A design file's encryptions, under fresh names, for the source's ``schema``.

    The file must describe exactly the source's tables and columns (names and
    types), and every encryption must be within ``policy``: fail closed.
    """
    wanted = {t: {c.name: c.type for c in cols} for t, cols in schema.items()}
    if design.plaintext_schema() != wanted:
        raise DesignError(
            "the design file describes other tables or columns than the source "
            f"(design: {sorted(design.tables)}; source: {sorted(schema)}); "
            "make it with `veil design` over data of the same schema"
        )
    forbidden = policy_violations(design, policy)
    if forbidden:
        raise DesignError(
            f"the design stores what the policy forbids: {', '.join(forbidden)}; "
            "design again under this policy (`veil design`)"
        )
    return fresh_design(design, fingerprint)
