"""A batch's values by source text: what the column ciphers encrypt."""

from __future__ import annotations

import numpy as np
import pyarrow as pa


class Sources(dict[str, pa.Array | pa.ChunkedArray]):
    """Each column and per-row expression of a batch, by source text.

    ``overflow[source]`` marks the rows whose expression DuckDB could not
    compute: +1 / -1 for a value beyond the type's top / bottom, 0 elsewhere
    (those rows hold NULL).
    """

    def __init__(self) -> None:
        super().__init__()
        self.overflow: dict[str, np.ndarray] = {}
