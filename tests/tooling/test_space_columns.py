"""The bench's split of a Veil table's bytes by kind of column (``space_columns``)."""

from __future__ import annotations

from veil.design.model import DET, OPE, RND, AsheSums, Column, Encryption, TableDesign
from veil_dev.bench.space_columns import ASHE_FLAGS, ASHE_WORDS, ROW_ID, column_kinds


def test_every_server_column_has_its_kind() -> None:
    table = TableDesign(
        "t", "t_x", "c_id", [Column("a", "BIGINT"), Column("b", "DECIMAL(7,2)")],
        [Encryption("c_a", "a", DET, "BIGINT", "det:a"),
         Encryption("c_ao", "a", OPE, "BIGINT", "ope:a"),
         Encryption("c_b", "b", RND, "DECIMAL(7,2)", "rnd:b")],
        sums=AsheSums(["b"], ["DECIMAL(7,2)"], [["c_w1", "c_w2"]], "ashe:s", "c_f"),
    )  # fmt: skip
    assert column_kinds(table) == {
        "c_a": DET, "c_ao": OPE, "c_b": RND, "c_id": ROW_ID,
        "c_w1": ASHE_WORDS, "c_w2": ASHE_WORDS, "c_f": ASHE_FLAGS,
    }  # fmt: skip
