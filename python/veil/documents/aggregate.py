"""Aggregation pipelines: the server's prefix, the client's rest.

The leading ``$match`` stages become one server ``$match``. When it is exact
and the next stage is a ``$group`` whose keys the server can group on (``int``
or ``datetime`` index fields, ``do_nothing`` fields) and whose accumulators it
can compute (``$count``, ``$sum`` of a constant, ``$sum``/``$avg`` of an
ASHE ``h_add`` field), the server groups: it sums the halves of the ASHE
ciphertexts per group (top-level int64 fields) and the client removes the pads. The ids of the summed
ciphertexts come from a second query (FerretDB 1.x has no ``$push``
accumulator). ``$sum``/``$avg`` of a Paillier ``h_add`` field and
``$product`` of an ``h_mul`` field (Veil's own accumulator) fetch the group
keys and ciphertexts in one find; the client multiplies the ciphertexts per
group and decrypts once per group. Every other stage runs on the client over
decrypted documents (or over the groups), with MongoDB's semantics.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any

import bson
import numpy as np
from bson.int64 import Int64

from veil.documents.elgamal import Product
from veil.documents.errors import DocumentsError, ServerRefusedError
from veil.documents.fetchsums import fetched_groups, fetched_groups_raw
from veil.documents.fields import additive_ids
from veil.documents.match import MISSING, get_path, matches
from veil.documents.positions import Positions
from veil.documents.query import translate_filter
from veil.documents.reads import Reads
from veil.documents.server import DatabaseContext
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
        group = self._server_group()
        return {
            "server": {"match": self.server_filter.document(), "group": group and group[0]},
            "client": {"match": None if self.server_filter.exact else self.query,
                       "stages": self.rest[1:] if group else self.rest},
        }  # fmt: skip

    def run(self) -> list[dict[str, Any]]:
        group = self._server_group()
        if group is not None:
            documents = self._grouped_on_server(*group)
            return run_client_stages(documents, self.rest[1:])
        stored = self.reads.find(self.server_filter.document(), None, 0, 0)
        documents = self.codec.decode_many(list(stored))
        if not self.server_filter.exact:
            documents = [d for d in documents if matches(d, self.query)]
        return run_client_stages(documents, self.rest)

    # -- the server's $group -------------------------------------------------------

    def _server_group(self) -> tuple[dict[str, Any], list[tuple[str, str, Any]]] | None:
        """({server $group}, [(output, kind, cipher)]) or None if the client must group."""
        if not self.server_filter.exact or not self.rest or "$group" not in self.rest[0]:
            return None
        spec = self.rest[0]["$group"]
        keys = self._keys(spec.get("_id"))
        if keys is None:
            return None
        server_keys = {k: server for k, (server, _) in keys.items()}
        if self._single_key:
            server_keys = server_keys["k"]  # type: ignore[assignment]
        group: dict[str, Any] = {"_id": server_keys or None}
        outputs: list[tuple[str, str, Any]] = []
        for output, accumulator in spec.items():
            if output == "_id":
                continue
            planned = self._accumulator(output, accumulator, group)
            if planned is None:
                return None
            outputs.append(planned)
        self._key_ciphers = keys
        return group, outputs

    def _keys(self, key: Any) -> dict[str, tuple[str, Any]] | None:
        """{key name: (server expression, cipher or None)}; '' names a single key."""
        self._single_key = isinstance(key, str)
        self._key_paths: list[str] = []
        if key is None:
            return {}
        parts = {"": key} if isinstance(key, str) else key
        if not isinstance(parts, dict):
            return None
        out: dict[str, tuple[str, Any]] = {}

        for name, expression in parts.items():
            if not isinstance(expression, str) or not expression.startswith("$"):
                return None
            path = expression[1:]
            self._key_paths.append(path)
            spec = self.codec.schema.spec(path)
            if spec is not None and spec.attr == "do_nothing":
                out[name or "k"] = (expression, None)
            elif spec is not None and spec.exact_order and spec.path == path:
                cipher = self.codec.ciphers[path]
                out[name or "k"] = (f"${cipher.order_path}", cipher)
            else:
                return None
        return out

    def _accumulator(
        self, output: str, accumulator: Any, group: dict[str, Any]
    ) -> tuple[str, str, Any] | None:
        if not isinstance(accumulator, dict) or len(accumulator) != 1:
            return None
        ((op, argument),) = accumulator.items()
        if op == "$count" and argument == {}:
            group[output] = {"$sum": 1}
            return output, "count", None
        if op == "$sum" and isinstance(argument, int) and not isinstance(argument, bool):
            group[output] = {"$sum": argument}
            return output, "count", None
        if op in ("$sum", "$avg") and isinstance(argument, str) and argument.startswith("$"):
            spec = self.codec.schema.fields.get(argument[1:])
            if spec is None or spec.attr != "h_add":
                return None
            cipher = self.codec.ciphers[spec.path]
            if cipher.paillier is not None:  # the client multiplies fetched ciphertexts
                return output, f"paillier_{op[1:]}", cipher
            if cipher.chained is not None:  # one word a value: one $group, no ids
                group[output] = {"$sum": f"${cipher.name}"}
                return output, f"chain_{op[1:]}", cipher
            group[f"{output}_l"] = {"$sum": f"${cipher.name}"}  # earlier nested forms: ignored
            group[f"{output}_h"] = {"$sum": f"${cipher.name}h"}  # here, added by _summed_ids
            return output, op[1:], cipher
        if op == "$product" and isinstance(argument, str) and argument.startswith("$"):
            spec = self.codec.schema.fields.get(argument[1:])
            if spec is None or spec.attr != "h_mul":
                return None
            return output, "product", self.codec.ciphers[spec.path]
        return None

    def _grouped_on_server(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]]
    ) -> list[dict[str, Any]]:
        # products, Paillier and chained values (whose words the id path cannot open)
        fetched = any(kind not in ("sum", "avg", "count") for _, kind, _ in outputs)
        if self._all_chained(outputs):
            if self.database.groups_push(self.reads.server):
                chained = self._chained_runs(group, outputs)
            elif _filter_paths(self.query) <= set(self._key_paths):
                chained = self._chained_documents(group, outputs)
            else:
                chained = None
            if chained is not None:
                return chained
        if self.database.sums == "fetch" or fetched:
            rows, ids = self._fetched_rows(group, outputs)
        else:
            rows, ids = self._server_sums(group, outputs)
        results = []
        for key, row in rows.items():
            document = {"_id": self._plain_key(row.get("_id"))}
            for output, kind, cipher in outputs:
                if cipher is None:
                    document[output] = row[output]
                    continue
                if kind == "product":
                    product = ids.get(key, {}).get(f"{output}*", Product())
                    document[output] = product.value(cipher.elgamal)
                    continue
                if kind.startswith("paillier_"):
                    document[output] = _paillier_total(kind, cipher, ids.get(key, {}).get(output))
                    continue
                if kind.startswith("chain_"):
                    document[output] = _opened_total(kind, ids.get(key, {}).get(cipher.name))
                    continue
                total = (int(row[f"{output}_h"]) << 32) + int(row[f"{output}_l"])
                total += ids.get(key, {}).get(cipher.name + "+", 0)
                group_ids = ids.get(key, {}).get(cipher.name, [])
                count = ids.get(key, {}).get(cipher.name + "#", 0)
                value = cipher.additive_sum(total, group_ids) if len(group_ids) else 0
                document[output] = value if kind == "sum" else (value / count if count else None)
            results.append(document)
        return results

    # -- chained fields: one $group, the chain lengths --------------------------------

    def _all_chained(self, outputs: list[tuple[str, str, Any]]) -> bool:
        """Whether every sum is of a field chained by this pipeline's one group key. Over
        whole groups (a filter on the key alone keeps or drops each group whole, the
        count check proves it) they are summed by :meth:`_chained_documents`. Where the
        server computes several accumulators in one ``$group``, by :meth:`_chained_runs`,
        filtered on any field, without reading the chains' lengths."""
        if not self._single_key:
            return False
        (key_path,) = self._key_paths
        kinds = [(kind, cipher) for _, kind, cipher in outputs if kind != "count"]
        return bool(kinds) and all(
            kind.startswith("chain_") and cipher.spec.chain == key_path for kind, cipher in kinds
        )

    def _chained_documents(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]], split: bool = False
    ) -> list[dict[str, Any]] | None:
        """The groups from one ``$group`` per chained field (and per count), or None when
        a chain has holes, moved values or more values than it sums exactly: the caller
        then fetches. The chain lengths are read after the aggregation (see chains.py).
        Fields whose chains are known to be past their capacity are grouped by sub-chain
        too; a chain found past it afterwards makes one more aggregation of that kind."""
        chained = {c.name: c for _, kind, c in outputs if kind != "count"}.values()
        by_sub = {
            output: f"${cipher.name}s"
            for output, kind, cipher in outputs
            if kind != "count" and (split or self.positions.known_longer(cipher))
        }
        rows = self._server_rows(group, by_sub)
        plain = [self._plain_key(row.get("_id")) for row in rows.values()]
        lengths, drifts = {}, {}
        for cipher in chained:
            lengths[cipher.name], drifts[cipher.name] = self.positions.lengths(cipher, plain)
        unsplit = [c for o, kind, c in outputs if kind != "count" and o not in by_sub]
        if any(
            length > cipher.chained.layout.capacity and self.positions.split(cipher)
            for cipher in unsplit
            for _, length in lengths[cipher.name]
        ):  # a field's chain found past its capacity: its sums again, by sub-chain
            return self._chained_documents(group, outputs, split=True)
        results = []
        for j, (key, row) in enumerate(zip(plain, rows.values(), strict=True)):
            document: dict[str, Any] = {"_id": key}
            for output, kind, cipher in outputs:
                if output not in row:  # a group that came into being between aggregations
                    return None
                if cipher is None:
                    document[output] = row[output]
                    continue
                chain, length = lengths[cipher.name][j]
                total = cipher.chained.chain_sum(row[output], chain, length, drifts[cipher.name])
                if total is None:
                    return None
                document[output] = _opened_total(kind, [total, length])
            results.append(document)
        return results

    def _server_sums(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]]
    ) -> tuple[dict[bytes, dict[str, Any]], dict[bytes, dict[str, Any]]]:
        """The groups summed by the server (``sums="server"``): one aggregation where the
        server's ``$group`` computes several accumulators and ``$push`` (MongoDB), else
        one per accumulator and a find of the summed ids (FerretDB 1.24)."""
        ciphers = [cipher for _, _, cipher in outputs if cipher is not None]
        if ciphers and self.database.groups_push(self.reads.server):
            pushed = self._pushed_rows(group, outputs)
            if pushed is not None:
                return pushed
        keys = {k: server for k, (server, _) in self._key_ciphers.items()}
        return self._server_rows(group), self._summed_ids(keys, ciphers) if ciphers else {}

    def _pushed_rows(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]]
    ) -> tuple[dict[bytes, dict[str, Any]], dict[bytes, dict[str, Any]]] | None:
        """Each group's accumulators and summed ids from one aggregation: the halves'
        sums, the values' ids (``$push`` skips a missing field, so a document without a
        value adds none) and the ids of their ``$inc``, and for ``$avg`` how many values.
        None, and the caller takes the other server path, when the server refuses it (a
        group's ids past its 16 MB document limit, say) or the field holds values of an
        earlier nested form (the server's ``$sum`` skips them; ``_summed_ids`` adds them)."""
        stage = dict(group)
        pushes: dict[str, tuple[Any, dict[str, str]]] = {}
        averaged = {cipher.name for _, kind, cipher in outputs if kind == "avg"}
        for cipher in {c.name: c for _, _, c in outputs if c is not None}.values():
            name = cipher.name
            if self.reads.holds_nested_forms(cipher):
                return None
            parts: dict[str, Any] = {"i": {"$push": f"${name}i"}, "j": {"$push": f"${name}j"}}
            if name in averaged:  # a value always has its high half, an absent one not
                parts["count"] = {"$sum": {"$cond": [{"$gt": [f"${name}h", None]}, 1, 0]}}
            names: dict[str, str] = {}
            for part, accumulator in parts.items():
                names[part] = _fresh(stage, f"_{name}_{part}")
                stage[names[part]] = accumulator
            pushes[name] = cipher, names
        found = self._one_group(stage)
        if found is None:
            return None
        rows: dict[bytes, dict[str, Any]] = {}
        ids: dict[bytes, dict[str, Any]] = {}
        for row in found:
            key = self._row_key(row.get("_id"))
            entry = ids.setdefault(key, {})
            for name, (_, names) in pushes.items():
                got = {part: row.pop(output, None) for part, output in names.items()}
                if not isinstance(got["i"], list):
                    return None
                try:
                    first = np.array(got["i"], dtype=np.int64)
                    added = np.array(list(chain.from_iterable(got["j"] or ())), dtype=np.int64)
                except (TypeError, ValueError):  # not the flat form's int64 ids
                    return None
                entry[name] = np.concatenate([first, added])
                entry[name + "#"] = got.get("count") or 0
            rows[key] = row
        return rows, ids

    def _one_group(self, stage: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The rows of one ``$group`` after the server filter; None if the server refuses
        it (an accumulator it lacks, a row past its 16 MB document limit)."""
        server_filter = self.server_filter.document()
        pipeline = [{"$match": server_filter}] if server_filter else []
        try:
            return self.reads.aggregate([*pipeline, {"$group": stage}])
        except ServerRefusedError:
            return None

    def _row_key(self, raw_key: Any) -> bytes:
        """The identity of a group the server returned under ``raw_key``."""
        return self._key_bytes({"k": raw_key} if self._single_key else raw_key)

    def _chained_runs(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]], split: bool = False
    ) -> list[dict[str, Any]] | None:
        """Chained sums over a filtered set, on a server whose ``$group`` computes several
        accumulators: one aggregation of each group's words and least and greatest
        position summed. A chain's positions are distinct, so a count (the words' low
        bits) equal to ``max - min + 1`` proves the documents summed hold exactly
        positions min..max, whose pads telescope. A filter that follows the order the
        values were written in (a range of dates written in date order, say) leaves
        such runs; any other leaves holes, and None sends the query to the fetched
        path. A field whose chains need sub-chains is grouped by them too (one chained
        field only: one sub-chain field in the key)."""
        chained = {c.name: c for _, kind, c in outputs if kind != "count"}
        sub_field = None
        if len(chained) == 1:
            (only,) = chained.values()
            if split or self.positions.known_longer(only):
                sub_field = f"${only.name}s"
        stage = dict(group)
        if sub_field:
            stage["_id"] = {"k": group["_id"], "s": sub_field}
        bounds: dict[str, tuple[str, str]] = {}
        for name in chained:
            low, high = _fresh(stage, f"_{name}_first"), _fresh(stage, f"_{name}_last")
            stage[low], stage[high] = {"$min": f"${name}p"}, {"$max": f"${name}p"}
            bounds[name] = low, high
        found = self._one_group(stage)
        if found is None:
            return None
        groups: dict[bytes, tuple[Any, dict[int, dict[str, Any]]]] = {}
        for row in found:  # with sub-chains: {k, s}; a missing key joins the null one
            raw_key, sub = row.pop("_id", None), 0
            if sub_field:
                pair = raw_key if isinstance(raw_key, dict) else {}
                raw_key, sub = pair.get("k"), int(pair.get("s") or 0)
            subs = groups.setdefault(self._row_key(raw_key), (raw_key, {}))[1]
            if sub in subs:  # the null group's other half: positions of the same chain
                subs[sub] = _joined(subs[sub], row, bounds.values())
            else:
                subs[sub] = row
        plain = [self._plain_key(raw_key) for raw_key, _ in groups.values()]
        numbers, drifts = {}, {}  # runs need no chain length: the drift counter alone
        for name, cipher in chained.items():
            numbers[name], drifts[name] = self.positions.numbers(cipher, plain)
        results = []
        for j, (key, (_, subs)) in enumerate(zip(plain, groups.values(), strict=True)):
            parts = list(subs.values())
            document: dict[str, Any] = {"_id": key}
            for output, kind, cipher in outputs:
                if cipher is None:
                    document[output] = sum(part[output] for part in parts)
                    continue
                layout, (low, high) = cipher.chained.layout, bounds[cipher.name]
                total = count = 0
                for part in parts:
                    first, last = part.get(low), part.get(high)
                    if first is None and last is None and part[output] == 0:
                        continue  # no value summed here
                    if not isinstance(first, int) or not isinstance(last, int):
                        return None
                    longer = last - first + 1 > layout.capacity and not sub_field
                    if longer and len(chained) == 1 and self.positions.split(cipher):
                        self.positions.summed_longer(cipher)
                        return self._chained_runs(group, outputs, split=True)
                    opened = cipher.chained.group_sum(
                        part[output], numbers[cipher.name][j], first, last, drifts[cipher.name]
                    )
                    if opened is None:
                        return None
                    total, count = total + opened, count + last - first + 1
                document[output] = _opened_total(kind, [total, count])
            results.append(document)
        return results

    def _server_rows(
        self, group: dict[str, Any], by_sub: dict[str, str] | None = None
    ) -> dict[bytes, dict[str, Any]]:
        """Each group's server accumulators: one aggregation per accumulator, as FerretDB
        1.24 computes only the first accumulator of a $group (later ones come back 0),
        or one per grouping where the server computes several. An output named in
        ``by_sub`` is grouped by the key and that sub-chain field too: its row holds
        ``{sub-chain: total}`` (an absent sub-chain field is 0)."""
        rows: dict[bytes, dict[str, Any]] = {}
        server_filter = self.server_filter.document()
        match = [{"$match": server_filter}] if server_filter else []
        accumulators = [(k, v) for k, v in group.items() if k != "_id"] or [("_n", {"$sum": 1})]
        stages: list[tuple[str | None, dict[str, Any]]] = []
        together = self.database.groups_push(self.reads.server)
        for output, accumulator in accumulators:
            sub_field = (by_sub or {}).get(output)
            joined = [s for f, s in stages if f == sub_field] if together else []
            if joined:
                joined[0][output] = accumulator
                continue
            key = {"k": group["_id"], "s": sub_field} if sub_field else group["_id"]
            stages.append((sub_field, {"_id": key, output: accumulator}))
        for sub_field, stage in stages:
            outputs = [output for output in stage if output != "_id"]
            for row in self.reads.aggregate([*match, {"$group": stage}]):
                raw_key, sub = row.get("_id"), None
                if sub_field:  # {k, s}; a missing key and a null one are apart here
                    parts = raw_key if isinstance(raw_key, dict) else {}
                    raw_key, sub = parts.get("k"), int(parts.get("s") or 0)
                entry = rows.setdefault(self._row_key(raw_key), {"_id": raw_key})
                for output in outputs:
                    if sub is None:
                        entry[output] = row[output]
                    else:  # both halves of the null group add up (a double stays a double)
                        totals = entry.setdefault(output, {})
                        totals[sub] = totals.get(sub, 0) + row[output]
        return rows

    def _fetched_rows(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]]
    ) -> tuple[dict[bytes, dict[str, Any]], dict[bytes, dict[str, Any]]]:
        """The groups from one find of the keys and ciphertexts (``sums="fetch"``): one
        scan where FerretDB needs one per accumulator and one for the ids."""
        keys = {k: server for k, (server, _) in self._key_ciphers.items()}
        additive = {cipher.name: cipher for _, _, cipher in outputs if cipher is not None}
        names = [n for cipher in additive.values() for n in cipher.stored_names]
        projection = _only({e[1:]: 1 for e in keys.values()} | dict.fromkeys(names, 1))
        shape = self._column_shape(group, outputs)
        if shape is None:
            stored = self.reads.find_projected(self.server_filter.document(), projection)
        else:  # raw batches read by one native call; decoded only for another shape
            batches = self.reads.find_raw(self.server_filter.document(), projection)
            columns = fetched_groups_raw(batches, *shape)
            if columns is not None:
                return columns
            stored = self.reads.decode_raw(batches)
            columns = fetched_groups(stored, *shape)
            if columns is not None:
                return columns
        rows: dict[bytes, dict[str, Any]] = {}
        ids: dict[bytes, dict[str, Any]] = {}
        for document in stored:
            values = {k: get_path(document, e[1:]) for k, e in keys.items()}
            present = {k: v for k, v in values.items() if v is not MISSING}
            key = self._key_bytes(present)
            if key not in rows:
                server_key = present.get("k") if self._single_key else present
                rows[key] = {"_id": server_key, **{k: 0 for k in group if k != "_id"}}
            row, entry = rows[key], ids.setdefault(key, {})
            counted: set[str] = set()  # a field's ids once, however many outputs read it
            for output, kind, cipher in outputs:
                if cipher is None:
                    row[output] += group[output]["$sum"]
                    continue
                form = cipher.gathered(document)
                if kind == "product":
                    if isinstance(form, dict):
                        entry.setdefault(f"{output}*", Product()).add(cipher.elgamal.parse(form))
                    continue
                if kind.startswith("paillier_"):
                    if form is not None and form is not MISSING:
                        entry.setdefault(output, []).append(form)
                    continue
                if kind.startswith("chain_"):
                    if cipher.name not in counted and isinstance(form, dict):
                        counted.add(cipher.name)
                        opened = entry.setdefault(cipher.name, [0, 0])
                        opened[0] += cipher.chained.value(form)
                        opened[1] += 1
                    continue
                if isinstance(form, dict) and ("i" in form or "j" in form):
                    row[f"{output}_l"] += int(form["l"])
                    row[f"{output}_h"] += int(form["h"])
                    if cipher.name not in counted:
                        counted.add(cipher.name)
                        entry.setdefault(cipher.name, []).extend(additive_ids(form))
                        entry[cipher.name + "#"] = entry.get(cipher.name + "#", 0) + 1
        return rows, ids

    def _column_shape(
        self, group: dict[str, Any], outputs: list[tuple[str, str, Any]]
    ) -> tuple[str | None, dict[str, int], dict[str, str]] | None:
        """``(key path, constants, additive)`` for reading the fetched groups column by
        column (veil.documents.fetchsums) when the pipeline has the common shape: one
        key or none, sums of constants and ``$sum``/``$avg`` of flat ASHE fields; None
        otherwise."""
        if len(self._key_ciphers) > 1 or (self._key_ciphers and not self._single_key):
            return None
        additive: dict[str, str] = {}
        for output, kind, cipher in outputs:
            if cipher is None:
                continue
            if kind not in ("sum", "avg") or cipher.chained is not None:
                return None
            additive[output] = cipher.name
        constants = {o: group[o]["$sum"] for o, _, c in outputs if c is None}
        key_path = next(iter(self._key_ciphers.values()))[0][1:] if self._key_ciphers else None
        return key_path, constants, additive

    def _summed_ids(self, keys: dict[str, str], ciphers: list[Any]) -> dict[bytes, dict[str, Any]]:
        """Per group key: the ASHE ids of each summed field, how many values it has, and
        the ciphertexts of earlier nested forms, which the server's ``$sum`` skipped."""
        ciphers = list({c.name: c for c in ciphers}.values())  # once per field, not output
        ids = {f"{c.name}{part}": 1 for c in ciphers for part in ("i", "j")}
        ids |= {f"{c.name}.{part}": 1 for c in ciphers for part in ("l", "h", "i", "j")}
        projection = _only({e[1:]: 1 for e in keys.values()} | ids)
        stored = self.reads.find_projected(self.server_filter.document(), projection)
        out: dict[bytes, dict[str, Any]] = {}
        for document in stored:
            values = {k: get_path(document, e[1:]) for k, e in keys.items()}
            key = self._key_bytes({k: v for k, v in values.items() if v is not MISSING})
            entry = out.setdefault(key, {})
            for cipher in ciphers:
                nested = document.get(cipher.name)
                form = _flat_ids(document, cipher.name)
                if isinstance(nested, dict) and "l" in nested and "h" in nested:
                    added = (int(nested["h"]) << 32) + int(nested["l"])
                    entry[cipher.name + "+"] = entry.get(cipher.name + "+", 0) + added
                    form = nested
                if "i" in form or "j" in form:
                    entry.setdefault(cipher.name, []).extend(additive_ids(form))
                    entry[cipher.name + "#"] = entry.get(cipher.name + "#", 0) + 1
        return out

    def _key_bytes(self, server_key: Any) -> bytes:
        """One group's identity: its keys in order, an absent key apart from null."""
        if not self._key_ciphers:
            return b""
        present = server_key if isinstance(server_key, dict) else {}
        values = [present.get(k) if k in present else {"$absent": 1} for k in self._key_ciphers]
        values = [int(v) if isinstance(v, Int64) else v for v in values]  # ints group as one
        if self._single_key:
            values = [None if isinstance(v, dict) else v for v in values]
        return bson.encode({"k": values})

    def _plain_key(self, server_key: Any) -> Any:
        if not self._key_ciphers:
            return None
        if self._single_key:
            ((_, cipher),) = self._key_ciphers.values()
            return _decrypt_key(cipher, server_key)
        present = server_key if isinstance(server_key, dict) else {}
        return {
            name: _decrypt_key(cipher, present[name])
            for name, (_, cipher) in self._key_ciphers.items()
            if name in present
        }


def _filter_paths(query: Any) -> set[str]:
    """The field paths a filter reads (its logical operators' parts included)."""
    paths: set[str] = set()
    for key, condition in query.items():
        if key in ("$and", "$or", "$nor"):
            for part in condition:
                paths |= _filter_paths(part)
        else:  # translate_filter refused any other operator at the top
            paths.add(key)
    return paths


def _paillier_total(kind: str, cipher: Any, ciphertexts: list[bytes] | None) -> Any:
    """A group's Paillier ``$sum`` (0 without values) or ``$avg`` (None without values)."""
    if not ciphertexts:
        return 0 if kind == "paillier_sum" else None
    total = cipher.paillier.sum(ciphertexts)
    return total if kind == "paillier_sum" else total / len(ciphertexts)


def _opened_total(kind: str, opened: list[int] | None) -> Any:
    """A chained field's ``$sum`` (0 without values) or ``$avg`` (None without values)
    from ``[sum, count]``."""
    total, count = opened or (0, 0)
    if kind == "chain_sum":
        return total
    return total / count if count else None


def _joined(
    one: dict[str, Any], other: dict[str, Any], bounds: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """Two rows of one group's positions as one: sums added, the least and the greatest
    position of both (a missing bound, no value there, left out)."""
    out = {name: value + other[name] for name, value in one.items()}
    for low, high in bounds:
        lows = [row[low] for row in (one, other) if row.get(low) is not None]
        highs = [row[high] for row in (one, other) if row.get(high) is not None]
        out[low], out[high] = min(lows, default=None), max(highs, default=None)
    return out


def _fresh(names: dict[str, Any], base: str) -> str:
    """``base``, suffixed if need be to differ from every name already in ``names``."""
    name, n = base, 0
    while name in names:
        n += 1
        name = f"{base}{n}"
    return name


def _flat_ids(document: dict[str, Any], name: str) -> dict[str, Any]:
    """The ids of a flat ASHE form as :func:`additive_ids` reads them."""
    return {part: document[name + part] for part in ("i", "j") if name + part in document}


def _only(fields: dict[str, int]) -> dict[str, int]:
    """An inclusion projection of ``fields`` without ``_id`` (smaller replies: FerretDB's
    cost grows with every document it returns); ``_id`` alone when nothing else is needed."""
    return fields | {"_id": 0} if fields else {"_id": 1}


def _decrypt_key(cipher: Any, value: Any) -> Any:
    if cipher is None or value is None:
        return value
    if isinstance(value, list):
        return [_decrypt_key(cipher, v) for v in value]
    return cipher.order_value(value)
