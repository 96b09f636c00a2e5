//! Arrow's variable-length binary layout, as plain slices.
//!
//! A binary or string column is three buffers: `offsets` (n + 1 of them;
//! value i is `data[offsets[i]..offsets[i + 1]]`), `data`, and an optional
//! validity bitmap (bit i, least significant bit first, is 1 when row i is
//! not NULL). The glue hands the kernels these buffers without copying; the
//! kernels write their results into one output buffer sized up front.

use crate::KernelError;

/// A checked, read-only view of one binary column.
///
/// The offsets are checked once here so that the hot loops can slice
/// without returning errors (and without panicking on bad input).
#[derive(Debug, Clone, Copy)]
pub struct BinaryColumn<'a> {
    offsets: &'a [i64],
    data: &'a [u8],
    validity: Option<&'a [u8]>,
}

impl<'a> BinaryColumn<'a> {
    /// Check the buffers and wrap them.
    ///
    /// `validity`, when given, must start at row 0 (bit offset 0) and hold at
    /// least one bit per row.
    pub fn new(
        offsets: &'a [i64],
        data: &'a [u8],
        validity: Option<&'a [u8]>,
    ) -> Result<Self, KernelError> {
        let Some(&first) = offsets.first() else {
            return Err(KernelError::Parameter(
                "a binary column needs at least one offset".into(),
            ));
        };
        if first < 0 || offsets.windows(2).any(|w| w[1] < w[0]) {
            return Err(KernelError::Parameter(
                "binary column offsets must be non-negative and non-decreasing".into(),
            ));
        }
        if offsets[offsets.len() - 1] as u64 > data.len() as u64 {
            return Err(KernelError::Parameter(
                "binary column offsets point past the end of its data buffer".into(),
            ));
        }
        let rows = offsets.len() - 1;
        if validity.is_some_and(|bits| bits.len() * 8 < rows) {
            return Err(KernelError::Parameter(
                "binary column validity bitmap is shorter than the column".into(),
            ));
        }
        Ok(Self {
            offsets,
            data,
            validity,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether the column has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether row `row` holds a value (is not NULL).
    pub fn is_valid(&self, row: usize) -> bool {
        self.validity
            .is_none_or(|bits| bits[row / 8] >> (row % 8) & 1 == 1)
    }

    /// The bytes of row `row` (empty for a NULL row whatever the offsets say).
    pub fn value(&self, row: usize) -> Option<&'a [u8]> {
        if !self.is_valid(row) {
            return None;
        }
        let start = self.offsets[row] as usize;
        let end = self.offsets[row + 1] as usize;
        Some(&self.data[start..end])
    }

    /// Every row in order, `None` for NULL.
    pub fn rows(&self) -> impl Iterator<Item = Option<&'a [u8]>> + '_ {
        (0..self.len()).map(|row| self.value(row))
    }
}

/// The buffers of an output binary column with 32-bit offsets (Arrow's
/// `binary`); its NULLs are those of the input, so it carries no bitmap.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BinaryOutput {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

impl BinaryOutput {
    /// Lay out a column whose row `i` is `len_of(i)` bytes long (0 for
    /// NULL rows) and allocate its zeroed data buffer in one piece.
    pub fn with_lengths(
        column: &BinaryColumn<'_>,
        mut len_of: impl FnMut(usize, &[u8]) -> Result<usize, KernelError>,
    ) -> Result<Self, KernelError> {
        let mut offsets = Vec::with_capacity(column.len() + 1);
        offsets.push(0i32);
        let mut total: usize = 0;
        for (row, value) in column.rows().enumerate() {
            if let Some(value) = value {
                total += len_of(row, value)?;
            }
            offsets.push(i32::try_from(total).map_err(|_| too_large())?);
        }
        Ok(Self {
            offsets,
            data: vec![0u8; total],
        })
    }

    /// The output bytes of row `row`.
    pub fn row_mut(&mut self, row: usize) -> &mut [u8] {
        let start = self.offsets[row] as usize;
        let end = self.offsets[row + 1] as usize;
        &mut self.data[start..end]
    }
}

/// The error for an output that does not fit Arrow's 32-bit offsets.
pub fn too_large() -> KernelError {
    KernelError::Parameter(
        "the output column would exceed 2 GiB; process the column in smaller batches".into(),
    )
}

/// Buffers of a column built from a list of values (None = NULL), for tests.
#[cfg(test)]
pub(crate) fn layout(values: &[Option<&[u8]>]) -> (Vec<i64>, Vec<u8>, Vec<u8>) {
    let mut offsets = vec![0i64];
    let mut data = Vec::new();
    let mut validity = vec![0u8; values.len().div_ceil(8)];
    for (row, value) in values.iter().enumerate() {
        if let Some(bytes) = value {
            data.extend_from_slice(bytes);
            validity[row / 8] |= 1 << (row % 8);
        }
        offsets.push(data.len() as i64);
    }
    (offsets, data, validity)
}

/// A validity bitmap marking the rows with a non-empty value, for tests
/// (outputs carry no bitmap of their own: an empty row is a NULL there).
#[cfg(test)]
pub(crate) fn non_empty_rows(offsets: &[i64]) -> Vec<u8> {
    let mut validity = vec![0u8; (offsets.len() - 1).div_ceil(8)];
    for row in 0..offsets.len() - 1 {
        if offsets[row + 1] > offsets[row] {
            validity[row / 8] |= 1 << (row % 8);
        }
    }
    validity
}
