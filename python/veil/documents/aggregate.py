"""Aggregation pipelines: the server's prefix, the client's rest.

The leading ``$match`` stages become one server ``$match``. When it is exact and
the next stage is a ``$group`` the server can compute (veil.documents.groupplan:
keys it can group on, accumulators over ``h_add`` and ``h_mul`` fields), the server
groups, by the cheapest path that is exact:

* chained ``h_add`` sums: one ``$group`` of their words, proved complete by the
  chains (veil.documents.chainsums);
* ASHE sums with ``sums="server"``: the server adds the ciphertexts' halves and the
  client removes the pads of the ids summed (veil.documents.serversums);
* otherwise (``sums="fetch"``, Paillier sums, ``$product`` of ``h_mul`` fields, Veil's
  own accumulator): one find of the group keys and ciphertexts, combined per group
  by the client and decrypted once per group (veil.documents.fetchgroups).

Every other stage runs on the client over decrypted documents (or over the groups),
with MongoDB's semantics (veil.documents.stages).
"""

from __future__ import annotations

from typing import Any

from veil.documents.chainsums import chained_sums, opened_total
from veil.documents.elgamal import Product
from veil.documents.errors import DocumentsError
from veil.documents.fetchgroups import fetched_rows
from veil.documents.groupplan import GroupPlan, plan_group
from veil.documents.match import matches
from veil.documents.positions import Positions
from veil.documents.query import translate_filter
from veil.documents.reads import Reads
from veil.documents.server import DatabaseContext
from veil.documents.serversums import server_sums
from veil.documents.stages import run_client_stages


def run_pipeline(
    reads: Reads, positions: Positions, database: DatabaseContext, pipeline: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    return Pipeline(reads, positions, database, pipeline).run()


class Pipeline:
    """One aggregation of one collection: the server's prefix, then the client's rest."""

    def __init__(
        self, reads: Reads, positions: Positions, database: DatabaseContext,
        pipeline: list[dict[str, Any]],
    ) -> None:  # fmt: skip
        if not isinstance(pipeline, list) or not all(
            isinstance(s, dict) and len(s) == 1 for s in pipeline
        ):
            raise DocumentsError("a pipeline is a list of one-key stage documents")
        self.reads = reads
        self.positions = positions
        self.database = database
        self.codec = reads.codec
        lead = 0
        while lead < len(pipeline) and "$match" in pipeline[lead]:
            lead += 1
        self.query = {"$and": [s["$match"] for s in pipeline[:lead]]} if lead else {}
        self.rest = pipeline[lead:]
        self.server_filter = translate_filter(self.codec, self.query)

    def explain(self) -> dict[str, Any]:
        plan = self._server_group()
        return {
            "server": {"match": self.server_filter.document(),
                       "group": plan and dict(plan.stage)},
            "client": {"match": None if self.server_filter.exact else self.query,
                       "stages": self.rest[1:] if plan else self.rest},
        }  # fmt: skip

    def run(self) -> list[dict[str, Any]]:
        plan = self._server_group()
        if plan is not None:
            return run_client_stages(self._grouped_on_server(plan), self.rest[1:])
        stored = self.reads.find(self.server_filter.document(), None, 0, 0)
        documents = self.codec.decode_many(list(stored))
        if not self.server_filter.exact:
            documents = [d for d in documents if matches(d, self.query)]
        return run_client_stages(documents, self.rest)

    def _server_group(self) -> GroupPlan | None:
        """The server's $group, or None if the client must group."""
        if not self.server_filter.exact or not self.rest or "$group" not in self.rest[0]:
            return None
        return plan_group(self.codec, self.server_filter.document(), self.rest[0]["$group"])

    def _grouped_on_server(self, plan: GroupPlan) -> list[dict[str, Any]]:
        chained = chained_sums(plan, self.query, self.reads, self.positions, self.database)
        if chained is not None:
            return chained
        if self.database.sums == "fetch" or plan.fetched:
            rows, ids = fetched_rows(plan, self.reads)
        else:
            rows, ids = server_sums(plan, self.reads, self.database)
        results = []
        for key, row in rows.items():
            document = {"_id": plan.keys.plain(row.get("_id"))}
            for output, kind, cipher in plan.outputs:
                if cipher is None:
                    document[output] = row[output]
                    continue
                gathered = ids.get(key, {})
                if kind == "product":
                    product = gathered.get(f"{output}*", Product())
                    document[output] = product.value(cipher.elgamal)
                elif kind.startswith("paillier_"):
                    document[output] = _paillier_total(kind, cipher, gathered.get(output))
                elif kind.startswith("chain_"):
                    document[output] = opened_total(kind, gathered.get(cipher.name))
                else:
                    document[output] = _ashe_total(kind, cipher, row, gathered, output)
            results.append(document)
        return results


def _ashe_total(
    kind: str, cipher: Any, row: dict[str, Any], gathered: dict[str, Any], output: str
) -> Any:
    """A group's ASHE ``$sum`` (0 without values) or ``$avg`` (None without values): the
    server's (or the fetched) halves and earlier nested forms, the pads of its ids removed."""
    total = (int(row[f"{output}_h"]) << 32) + int(row[f"{output}_l"])
    total += gathered.get(cipher.name + "+", 0)
    group_ids = gathered.get(cipher.name, [])
    count = gathered.get(cipher.name + "#", 0)
    value = cipher.additive_sum(total, group_ids) if len(group_ids) else 0
    return value if kind == "sum" else (value / count if count else None)


def _paillier_total(kind: str, cipher: Any, ciphertexts: list[bytes] | None) -> Any:
    """A group's Paillier ``$sum`` (0 without values) or ``$avg`` (None without values)."""
    if not ciphertexts:
        return 0 if kind == "paillier_sum" else None
    total = cipher.paillier.sum(ciphertexts)
    return total if kind == "paillier_sum" else total / len(ciphertexts)
