"""An onion load's ASHE words, built by the first SUM or AVG that needs them.

An onion load (``veil.designer.onions``) stores every exact number's ASHE words
(``AsheSums``) as NULLs (``AsheSums.lazy``): most numbers are never summed,
and the words were TPC-DS SF 0.1's largest layer after the numbers' fetch
copies (89.7 of its 229 MB). Until they are built the planner sees no sums
(``veil.sql.sums.built_sums``) and a SUM runs on the client. The first
statement whose SUM/AVG reads one of the table's sums, outside a transaction,
builds all of them (``veil.session.onions.peel_layers``): it fetches each
summed column from the form it is fetched by (a row-bound RND copy, DET,
sealed blocks), decrypts it on the client and writes the words of every row,
under the lock of the sums' row in the layers table (``ashe_layer``), which
every write takes too (``veil.session.dml``). Writes since the load wrote their
rows' words already (``TableEncryptor``), the same ones the build writes.

The server learns nothing it did not: ASHE words are blind pads of the values
(``veil.crypto.ashe``), and their widths were fixed at load
(``veil.load.ashe_widths``), so the build changes only when they stop being NULL.
"""

from __future__ import annotations

import pyarrow as pa

from veil.ciphers.ashe_sums import AsheSumsCipher
from veil.ciphers.sources import Sources
from veil.crypto.keys import MasterKey
from veil.design.model import ASHE, AsheSums, Encryption, TableDesign
from veil.encoding import SqlType, decode


def ashe_layer(sums: AsheSums) -> Encryption:
    """The sums' stand-in in the layers table: a row named by their first word's server
    column (an opaque name), peeled once they are built."""
    return Encryption(sums.columns[0][0], "", ASHE, "BIGINT", sums.key_scope, {}, "onion")


def unbuilt_sums(table: TableDesign) -> AsheSums | None:
    """``table``'s sums if the server holds no words for them yet (``AsheSums.lazy``)."""
    sums = table.sums
    return sums if sums is not None and sums.lazy and sums.columns else None


def ashe_words(
    master: MasterKey,
    sums: AsheSums,
    values: dict[str, tuple[pa.Array, SqlType]],
    ids: pa.Array,
) -> dict[str, pa.Array]:
    """Every word column (and the flags word) of the rows ``ids``, whose summed columns hold
    ``values`` (encoded, with the SQL type they were encoded from), by server column."""
    sources = Sources()
    for source in sums.sources:
        encoded, sql_type = values[source]
        sources[source] = decode(encoded, sql_type)
    rows = ids.to_numpy(zero_copy_only=False).astype("int64")
    return AsheSumsCipher(master, sums).encrypt(sources, rows)
