"""Per-column security policy: the most a column may ever reveal to the server (SEEED §4).

A policy names, per column, its highest allowed layer, in order of what the
server learns:

- ``RND``: nothing but lengths and NULLs; the column is only fetched back;
- ``DET``: which rows hold equal values (equality filters, GROUP BY, joins,
  and word search over text: a searched word's matches), never order;
- ``OPE``: order too (ranges, ORDER BY, MIN/MAX on the server); the default;
- ``PLAIN``: anything, SEEED's "selective" choice; only with an explicit flag
  (``allow_plaintext``). Veil still stores such a column encrypted, at its
  weakest layers, peeled at load.

The designer never stores an encryption above a column's layer, and the
runtime never peels past it (``veil.session.onions``): a query needing more runs
that part on the client. The policy is a JSON file in the client directory
(``policy.json``, 0600: it names plaintext columns); templates set many
columns by name pattern at once.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from veil.design.model import DET, OPE, RND, SEARCH, Column, write_private
from veil.errors import VeilError

PLAIN = "PLAIN"
# each layer reveals at least what the ones before it do
LAYERS = (RND, DET, OPE, PLAIN)
DEFAULT_LAYER = OPE
POLICY_FILE = "policy.json"
POLICY_FORMAT = "veil-policy"

# The layer an operation needs on the server.
NEEDS = {DET: DET, SEARCH: DET, OPE: OPE}

# Templates: (column-name pattern, highest layer), first match wins.
TEMPLATES: dict[str, list[tuple[str, str]]] = {
    # balances, amounts, prices and names never in order; identifiers never compared at all
    "finance": [
        ("*ssn*", RND),
        ("*iban*", RND),
        ("*card*", RND),
        ("*bal*", DET),
        ("*amount*", DET),
        ("*price*", DET),
        ("*salary*", DET),
        ("*name*", DET),
    ],
    # TPC-H with order forbidden on every price, quantity and date (issue 12's policy run)
    "no-order-on-values": [
        ("*price*", DET),
        ("*quantity*", DET),
        ("*date*", DET),
    ],
}


class PolicyError(VeilError):
    """A policy names an unknown column or layer, or asks less than the data already reveals."""

    anchor = "policy"


@dataclass
class Policy:
    """``columns``: ``"table.column"`` -> highest layer; others get ``default``."""

    columns: dict[str, str] = field(default_factory=dict)
    default: str = DEFAULT_LAYER

    def layer(self, table: str, column: str) -> str:
        return self.columns.get(f"{table}.{column}".lower(), self.default)

    def allows(self, table: str, column: str, layer: str) -> bool:
        """May ``table.column`` reveal what ``layer`` reveals?"""
        return rank(layer) <= rank(self.layer(table, column))

    def set(self, table: str, column: str, layer: str, *, allow_plaintext: bool = False) -> None:
        self.columns[f"{table}.{column}".lower()] = checked_layer(layer, allow_plaintext)

    def to_json(self) -> str:
        document = {"format": POLICY_FORMAT, "default": self.default, "columns": self.columns}
        return json.dumps(document, indent=1, sort_keys=True)

    def save(self, path: str | os.PathLike[str]) -> None:
        write_private(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        """The policy at ``path``; none there means every column's default (OPE)."""
        target = Path(path)
        if not target.exists():
            return cls()
        try:
            document = json.loads(target.read_text())
        except json.JSONDecodeError as exc:
            raise PolicyError(f"{target} is not valid JSON ({exc}); fix or delete it") from None
        if not isinstance(document, dict) or document.get("format") != POLICY_FORMAT:
            raise PolicyError(f"{target} is not a Veil policy file")
        columns = {str(k): checked_layer(str(v), True) for k, v in document["columns"].items()}
        return cls(columns, checked_layer(str(document.get("default", DEFAULT_LAYER)), True))


def rank(layer: str) -> int:
    return LAYERS.index(layer)


def checked_layer(layer: str, allow_plaintext: bool = False) -> str:
    name = layer.upper()
    if name not in LAYERS:
        raise PolicyError(f"unknown layer {layer!r}; a policy layer is one of {', '.join(LAYERS)}")
    if name == PLAIN and not allow_plaintext:
        raise PolicyError(
            "PLAIN lets the server see a column's values; say so explicitly "
            "(--allow-plaintext, or allow_plaintext=True)"
        )
    return name


def template_layers(name: str, columns: list[tuple[str, str]]) -> dict[str, str]:
    """``{"table.column": layer}`` for the ``(table, column)`` pairs a template matches."""
    if name not in TEMPLATES:
        raise PolicyError(f"unknown policy template {name!r}; templates: {', '.join(TEMPLATES)}")
    chosen: dict[str, str] = {}
    for table, column in columns:
        for pattern, layer in TEMPLATES[name]:
            if fnmatch.fnmatchcase(column.lower(), pattern):
                chosen[f"{table}.{column}".lower()] = layer
                break
    return chosen


def check_policy_columns(policy: Policy, schema: dict[str, list[Column]]) -> None:
    """Refuse a policy naming a column ``schema`` does not have (a typo would protect nothing)."""
    known = {f"{t}.{c.name}".lower() for t, columns in schema.items() for c in columns}
    unknown = sorted(set(policy.columns) - known)
    tables = {name.split(".")[0] for name in unknown}
    if unknown and tables <= set(schema):
        raise PolicyError(
            f"the policy names unknown column(s) {', '.join(unknown)}; the columns are "
            f"{', '.join(sorted(known))}"
        )
