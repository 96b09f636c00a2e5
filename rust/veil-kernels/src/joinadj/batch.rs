//! Whole columns of JOIN-ADJ points: on all cores, compressed in batches.
//!
//! A point's encoding costs an inverse square root when compressed alone,
//! about a sixth of a value's time. `double_and_compress_batch` encodes `2·P`
//! for many points with one field inversion between them (Montgomery's
//! trick) and no square root, so each row computes `(s/2) · P` and the batch
//! doubles it: `2 · (s/2) · P = s · P` in a group of odd prime order, and a
//! ristretto255 encoding is canonical, so the bytes are those of
//! `compress(s · P)` (the unbatched path, kept in `encrypt`/`rekey` for one
//! value; `tests.rs` checks the two agree).
//!
//! Rows are cut into one contiguous run per core; each run writes its own
//! slice of the output, which holds the 33-byte ciphertexts of the non-NULL
//! rows back to back (NULL rows are empty).

use std::num::NonZeroUsize;
use std::thread;

use curve25519_dalek::ristretto::RistrettoPoint;
use curve25519_dalek::scalar::Scalar;
use zeroize::Zeroize;

use super::{CIPHERTEXT_LEN, VERSION};
use crate::binary::{BinaryColumn, BinaryOutput};
use crate::KernelError;

/// Points per call of `double_and_compress_batch`: the shared inversion is
/// ~1 us spread over them, and a batch's states stay in L1/L2 cache.
const BATCH: usize = 256;
/// Below this many rows per extra core a thread costs more than it saves.
const ROWS_PER_THREAD: usize = 64;

/// The ciphertexts `0x01 || encode(scalar · point_of(row, value))` of every
/// non-NULL row of `column`; the first (lowest-row) error of `point_of` if any.
pub(super) fn map_points<F>(
    column: &BinaryColumn<'_>,
    scalar: &Scalar,
    point_of: F,
) -> Result<BinaryOutput, KernelError>
where
    F: Fn(usize, &[u8]) -> Result<RistrettoPoint, KernelError> + Sync,
{
    let mut out = BinaryOutput::with_lengths(column, |_, _| Ok(CIPHERTEXT_LEN))?;
    // a key's scalar is secret: its half is zeroized as the key is
    let mut half = scalar * Scalar::from(2u64).invert();
    let written = write_points(column, &half, point_of, &mut out.data);
    half.zeroize();
    written.map(|()| out)
}

/// `map_points`' work: `data` holds a 33-byte slot per non-NULL row.
fn write_points<F>(
    column: &BinaryColumn<'_>,
    half: &Scalar,
    point_of: F,
    data: &mut [u8],
) -> Result<(), KernelError>
where
    F: Fn(usize, &[u8]) -> Result<RistrettoPoint, KernelError> + Sync,
{
    let rows: Vec<usize> = (0..column.len()).filter(|&r| column.is_valid(r)).collect();
    let per_thread = rows.len().div_ceil(threads(rows.len())).max(1);
    let run = |rows: &[usize], data: &mut [u8]| -> Result<(), KernelError> {
        for (rows, data) in rows
            .chunks(BATCH)
            .zip(data.chunks_mut(BATCH * CIPHERTEXT_LEN))
        {
            let points = rows
                .iter()
                .map(|&r| Ok(half * point_of(r, column.value(r).unwrap_or_default())?))
                .collect::<Result<Vec<_>, KernelError>>()?;
            let encoded = RistrettoPoint::double_and_compress_batch(&points);
            for (slot, point) in data.chunks_mut(CIPHERTEXT_LEN).zip(&encoded) {
                slot[0] = VERSION;
                slot[1..].copy_from_slice(point.as_bytes());
            }
        }
        Ok(())
    };
    if per_thread >= rows.len() {
        return run(&rows, data); // one run: no thread to start
    }
    let parts = rows
        .chunks(per_thread)
        .zip(data.chunks_mut(per_thread * CIPHERTEXT_LEN));
    let results: Vec<Result<(), KernelError>> = thread::scope(|scope| {
        let handles: Vec<_> = parts
            .map(|(rows, data)| scope.spawn(|| run(rows, data)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a JOIN-ADJ worker thread panicked"))
            .collect()
    });
    results.into_iter().collect()
}

/// Threads for `rows` values: one per core, fewer for short columns.
fn threads(rows: usize) -> usize {
    let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
    cores.min(rows / ROWS_PER_THREAD).max(1)
}
