//! The server's Paillier operations: multiplying ciphertexts modulo n^2.
//!
//! Adding Paillier plaintexts is multiplying their ciphertexts modulo n^2,
//! which needs only the public n^2, so nothing here sees a key. A stored
//! ciphertext is `0x01 || c`, `c` big-endian over exactly the byte width of
//! n^2 (see `python/veil/crypto/paillier_wire.py`, which owns the format).
//!
//! The arithmetic is GMP's (through `rug`, linked to the system libgmp): its
//! assembly multiplies 4096-bit numbers several times faster than a portable
//! Rust bignum. Each product is reduced with a plain GMP division. A
//! Montgomery or Barrett reduction would need GMP's internal `mpn_redc_n` or
//! a precomputed-inverse multiply that the public API does not offer; built
//! from public full multiplications either costs two more 4096-bit
//! multiplications (2 x 1.3 us), more than the division (2.3 us) it replaces.
//! What moving the loop here saves is Python's per-row conversions.
//!
//! Outputs are fixed-width rows packed back to back (one per result, NULLs
//! omitted): the caller adds the offsets and the validity bitmap, and splits
//! a column past Arrow's 2 GiB limit, as it already does for its own output.

use rug::integer::Order;
use rug::{Assign, Integer};

use crate::binary::BinaryColumn;
use crate::KernelError;

/// Below this many ciphertexts a group product stays on the calling thread.
const PARALLEL_MIN_ROWS: usize = 4096;

/// The version byte of every stored Paillier ciphertext.
pub const CIPHERTEXT_VERSION: u8 = 0x01;

/// The group of ciphertexts of one public key: integers in `1..n^2`.
#[derive(Debug, Clone)]
pub struct CiphertextGroup {
    n_square: Integer,
    /// n^2 big-endian over `width` bytes, for the byte-wise range check.
    limit: Vec<u8>,
    width: usize,
}

impl CiphertextGroup {
    /// The group for `n_square` given big-endian (leading zeros allowed).
    pub fn new(n_square: &[u8]) -> Result<Self, KernelError> {
        let n_square = Integer::from_digits(n_square, Order::Msf);
        if n_square <= 1 {
            return Err(KernelError::Parameter(
                "n^2 must be an integer above 1 (pass the public key's n squared)".into(),
            ));
        }
        let width = n_square.significant_digits::<u8>();
        let mut limit = vec![0u8; width];
        n_square.write_digits(&mut limit, Order::Msf);
        Ok(Self {
            n_square,
            limit,
            width,
        })
    }

    /// Bytes of one stored ciphertext: the version byte and the body.
    pub fn stride(&self) -> usize {
        self.width + 1
    }

    /// `a[i] * b[i] mod n^2` for every row where both are present, packed.
    pub fn multiply_rows(
        &self,
        a: &BinaryColumn<'_>,
        b: &BinaryColumn<'_>,
    ) -> Result<Vec<u8>, KernelError> {
        if a.len() != b.len() {
            return Err(KernelError::Parameter(format!(
                "cannot add ciphertext columns of different lengths ({} and {})",
                a.len(),
                b.len()
            )));
        }
        let pairs: Vec<_> = a
            .rows()
            .zip(b.rows())
            .enumerate()
            .filter_map(|(row, pair)| match pair {
                (Some(x), Some(y)) => Some((row, x, y)),
                _ => None,
            })
            .collect();
        let mut out = vec![0u8; pairs.len() * self.stride()];
        let mut work = Work::default();
        for ((row, x, y), slot) in pairs.into_iter().zip(out.chunks_exact_mut(self.stride())) {
            work.load_acc(self.body(row, x)?);
            self.multiply(&mut work, self.body(row, y)?);
            self.write(&mut work, slot);
        }
        Ok(out)
    }

    /// The product of a column's present ciphertexts (1 when there is none).
    pub fn product(&self, column: &BinaryColumn<'_>) -> Result<Vec<u8>, KernelError> {
        let mut out = vec![0u8; self.stride()];
        let mut work = Work::default();
        self.product_into(column, 0..column.len(), &mut work, &mut out)?;
        Ok(out)
    }

    /// The product of each group's present ciphertexts, packed: group `g` is
    /// rows `group_offsets[g]..group_offsets[g + 1]` of `members`.
    pub fn group_products(
        &self,
        members: &BinaryColumn<'_>,
        group_offsets: &[i64],
    ) -> Result<Vec<u8>, KernelError> {
        check_group_offsets(group_offsets, members.len())?;
        let groups = group_offsets.len().saturating_sub(1);
        let mut out = vec![0u8; groups * self.stride()];
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut work = Work::default();
        if threads < 2 || members.len() < PARALLEL_MIN_ROWS {
            for (bounds, slot) in group_offsets
                .windows(2)
                .zip(out.chunks_exact_mut(self.stride()))
            {
                self.accumulate(members, bounds[0] as usize..bounds[1] as usize, &mut work)?;
                self.write(&mut work, slot);
            }
            return Ok(out);
        }
        let partials = self.parallel_partials(members, group_offsets, threads)?;
        let mut products = vec![Integer::from(1); groups];
        for (group, partial) in partials {
            work.product.assign(&products[group] * &partial);
            products[group].assign(&work.product % &self.n_square);
        }
        for (product, slot) in products
            .into_iter()
            .zip(out.chunks_exact_mut(self.stride()))
        {
            work.acc = product;
            self.write(&mut work, slot);
        }
        Ok(out)
    }

    /// Partial products of pieces of the groups, computed on `threads` threads:
    /// multiplication modulo n^2 is associative, so a group's pieces can be
    /// multiplied apart and their products combined afterwards.
    fn parallel_partials(
        &self,
        members: &BinaryColumn<'_>,
        group_offsets: &[i64],
        threads: usize,
    ) -> Result<Vec<(usize, Integer)>, KernelError> {
        let piece = members
            .len()
            .div_ceil(threads * 4)
            .max(PARALLEL_MIN_ROWS / 4);
        let mut tasks = Vec::new();
        for (group, bounds) in group_offsets.windows(2).enumerate() {
            let (start, end) = (bounds[0] as usize, bounds[1] as usize);
            let mut from = start;
            while from < end {
                let to = (from + piece).min(end);
                tasks.push((group, from..to));
                from = to;
            }
        }
        let tasks = &tasks;
        let results: Vec<Result<Vec<(usize, Integer)>, KernelError>> =
            std::thread::scope(|scope| {
                let handles: Vec<_> = (0..threads)
                    .map(|thread| {
                        scope.spawn(move || {
                            let mut work = Work::default();
                            let mut done = Vec::new();
                            for (group, rows) in tasks.iter().skip(thread).step_by(threads) {
                                self.accumulate(members, rows.clone(), &mut work)?;
                                done.push((*group, work.acc.clone()));
                            }
                            Ok(done)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("a Paillier worker thread panicked"))
                    .collect()
            });
        let mut partials = Vec::new();
        for result in results {
            partials.extend(result?);
        }
        Ok(partials)
    }

    fn product_into(
        &self,
        column: &BinaryColumn<'_>,
        rows: std::ops::Range<usize>,
        work: &mut Work,
        slot: &mut [u8],
    ) -> Result<(), KernelError> {
        self.accumulate(column, rows, work)?;
        self.write(work, slot);
        Ok(())
    }

    /// `work.acc` = the product of the present ciphertexts of `rows` (1 if none).
    fn accumulate(
        &self,
        column: &BinaryColumn<'_>,
        rows: std::ops::Range<usize>,
        work: &mut Work,
    ) -> Result<(), KernelError> {
        work.acc.assign(1);
        for row in rows {
            if let Some(value) = column.value(row) {
                self.multiply(work, self.body(row, value)?);
            }
        }
        Ok(())
    }

    /// `acc = acc * body mod n^2`, reusing the scratch integers' limbs so
    /// the loop does not allocate.
    fn multiply(&self, work: &mut Work, body: &[u8]) {
        work.load_operand(body);
        work.product.assign(&work.acc * &work.operand);
        work.acc.assign(&work.product % &self.n_square);
    }

    /// `0x01 || acc`, `acc` zero-padded to the full width.
    fn write(&self, work: &mut Work, slot: &mut [u8]) {
        slot[0] = CIPHERTEXT_VERSION;
        let body = &mut slot[1..];
        // acc < n^2 fits the width, so its limbs cover the body.
        work.limbs.clear();
        work.limbs.resize(body.len().div_ceil(8), 0);
        work.acc.write_digits(&mut work.limbs, Order::Lsf);
        let mut limbs = work.limbs.iter();
        let mut chunks = body.rchunks_exact_mut(8);
        for (chunk, limb) in (&mut chunks).zip(&mut limbs) {
            chunk.copy_from_slice(&limb.to_be_bytes());
        }
        let head = chunks.into_remainder();
        if let Some(limb) = limbs.next() {
            head.copy_from_slice(&limb.to_be_bytes()[8 - head.len()..]);
        }
    }

    /// The body of a stored ciphertext, refusing anything that is not one.
    fn body<'v>(&self, row: usize, value: &'v [u8]) -> Result<&'v [u8], KernelError> {
        let malformed = |reason: String| KernelError::Malformed { row, reason };
        if value.len() != self.stride() {
            return Err(malformed(format!(
                "a Paillier ciphertext for this key is {} bytes, got {}; the value is \
                 truncated, from another key size, or not a Paillier ciphertext",
                self.stride(),
                value.len()
            )));
        }
        if value[0] != CIPHERTEXT_VERSION {
            return Err(malformed(format!(
                "unknown Paillier ciphertext version 0x{:02x} (this Veil reads 0x{:02x}); \
                 the value is corrupt or was written by a newer Veil",
                value[0], CIPHERTEXT_VERSION
            )));
        }
        let body = &value[1..];
        // Equal widths, so big-endian byte order is numeric order.
        if body >= self.limit.as_slice() || body.iter().all(|&byte| byte == 0) {
            return Err(malformed(
                "Paillier ciphertext is not an integer in 1..n^2-1; it is corrupt or \
                 belongs to a different key"
                    .into(),
            ));
        }
        Ok(body)
    }
}

/// Scratch integers of one loop; their limbs are allocated once.
#[derive(Default)]
struct Work {
    acc: Integer,
    operand: Integer,
    product: Integer,
    /// 64-bit limbs, least significant first: GMP imports and exports these
    /// with a copy, but bytes one at a time (0.5 us per 4096-bit number).
    limbs: Vec<u64>,
}

impl Work {
    /// `acc = body` (big-endian bytes).
    fn load_acc(&mut self, body: &[u8]) {
        self.load_limbs(body);
        self.acc.assign_digits(&self.limbs, Order::Lsf);
    }

    /// `operand = body` (big-endian bytes).
    fn load_operand(&mut self, body: &[u8]) {
        self.load_limbs(body);
        self.operand.assign_digits(&self.limbs, Order::Lsf);
    }

    fn load_limbs(&mut self, body: &[u8]) {
        self.limbs.clear();
        let mut chunks = body.rchunks_exact(8);
        for chunk in &mut chunks {
            let mut limb = [0u8; 8];
            limb.copy_from_slice(chunk);
            self.limbs.push(u64::from_be_bytes(limb));
        }
        let head = chunks.remainder();
        if !head.is_empty() {
            let mut limb = [0u8; 8];
            limb[8 - head.len()..].copy_from_slice(head);
            self.limbs.push(u64::from_be_bytes(limb));
        }
    }
}

fn check_group_offsets(offsets: &[i64], members: usize) -> Result<(), KernelError> {
    let bad = match offsets {
        [] => false,
        [first, ..] => {
            *first < 0
                || offsets.windows(2).any(|w| w[1] < w[0])
                || offsets[offsets.len() - 1] as u64 > members as u64
        }
    };
    if bad {
        return Err(KernelError::Parameter(
            "group offsets must be non-decreasing and within the member column".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::layout;

    // n = 11 * 13 = 143, n^2 = 20449 (two bytes).
    const N_SQUARE: u64 = 20449;

    fn group() -> CiphertextGroup {
        CiphertextGroup::new(&N_SQUARE.to_be_bytes()).unwrap()
    }

    fn wire(c: u64) -> Vec<u8> {
        vec![CIPHERTEXT_VERSION, (c >> 8) as u8, c as u8]
    }

    fn unwire(rows: &[u8]) -> Vec<u64> {
        rows.chunks_exact(3)
            .map(|row| {
                assert_eq!(row[0], CIPHERTEXT_VERSION);
                u64::from(row[1]) << 8 | u64::from(row[2])
            })
            .collect()
    }

    fn column(values: &[Option<u64>]) -> (Vec<i64>, Vec<u8>, Vec<u8>) {
        let wired: Vec<Option<Vec<u8>>> = values.iter().map(|v| v.map(wire)).collect();
        let refs: Vec<Option<&[u8]>> = wired.iter().map(|v| v.as_deref()).collect();
        layout(&refs)
    }

    #[test]
    fn multiplies_rows_and_skips_nulls() {
        let (ao, ad, av) = column(&[Some(2), Some(20000), None, Some(5)]);
        let (bo, bd, bv) = column(&[Some(3), Some(20000), Some(7), None]);
        let a = BinaryColumn::new(&ao, &ad, Some(&av)).unwrap();
        let b = BinaryColumn::new(&bo, &bd, Some(&bv)).unwrap();
        let out = group().multiply_rows(&a, &b).unwrap();
        assert_eq!(unwire(&out), vec![6, 20000 * 20000 % N_SQUARE]);
    }

    #[test]
    fn products_of_column_and_groups() {
        let values = [Some(2), None, Some(10000), Some(3), Some(4)];
        let (o, d, v) = column(&values);
        let members = BinaryColumn::new(&o, &d, Some(&v)).unwrap();
        let total = group().product(&members).unwrap();
        assert_eq!(unwire(&total), vec![2 * 10000 * 3 * 4 % N_SQUARE]);
        let sums = group().group_products(&members, &[0, 3, 3, 5]).unwrap();
        assert_eq!(unwire(&sums), vec![20000, 1, 12]);
    }

    #[test]
    fn parallel_group_products_equal_sequential_ones() {
        // enough rows for the threaded path, with NULLs, an empty group and
        // a group much larger than one piece
        let values: Vec<Option<u64>> = (0..3 * PARALLEL_MIN_ROWS as u64)
            .map(|i| (i % 11 != 0).then_some(1 + i * 7919 % (N_SQUARE - 1)))
            .collect();
        let (o, d, v) = column(&values);
        let members = BinaryColumn::new(&o, &d, Some(&v)).unwrap();
        let n = values.len() as i64;
        let offsets = [0, 5, 5, 1000, n - 1, n];
        let sums = unwire(&group().group_products(&members, &offsets).unwrap());
        let expected: Vec<u64> = offsets
            .windows(2)
            .map(|b| {
                values[b[0] as usize..b[1] as usize]
                    .iter()
                    .flatten()
                    .fold(1, |acc, c| acc * c % N_SQUARE)
            })
            .collect();
        assert_eq!(sums, expected);
    }

    #[test]
    fn empty_column_sums_to_one() {
        let (o, d, _) = column(&[]);
        let empty = BinaryColumn::new(&o, &d, None).unwrap();
        assert_eq!(unwire(&group().product(&empty).unwrap()), vec![1]);
    }

    #[test]
    fn refuses_malformed_ciphertexts() {
        let bad: [&[u8]; 4] = [&[1, 0, 0], &[1, 0x4f, 0xe1], &[2, 0, 1], &[1, 1]];
        for value in bad {
            let (o, d, _) = layout(&[Some(&wire(1)), Some(value)]);
            let col = BinaryColumn::new(&o, &d, None).unwrap();
            let err = group().product(&col).unwrap_err();
            assert!(
                matches!(err, KernelError::Malformed { row: 1, .. }),
                "{err}"
            );
        }
    }

    #[test]
    fn refuses_bad_parameters() {
        assert!(CiphertextGroup::new(&[0, 1]).is_err());
        let (o, d, _) = column(&[Some(1), Some(2)]);
        let col = BinaryColumn::new(&o, &d, None).unwrap();
        assert!(group().group_products(&col, &[0, 3]).is_err());
        assert!(group().group_products(&col, &[1, 0]).is_err());
        let (o1, d1, _) = column(&[Some(1)]);
        let one = BinaryColumn::new(&o1, &d1, None).unwrap();
        assert!(group().multiply_rows(&col, &one).is_err());
    }

    #[test]
    fn matches_big_integers_at_any_width() {
        // Odd moduli stand in for n^2 (the arithmetic is the same); 4096 bits
        // is a 2048-bit key's, the others leave a partial 64-bit limb.
        for bits in [4095u32, 1023, 100, 65, 60] {
            let n_square: Integer = (Integer::from(1) << bits) + 12345u32;
            let group = CiphertextGroup::new(&n_square.to_digits::<u8>(Order::Msf)).unwrap();
            let x: Integer = (Integer::from(1) << (bits - 1)) + 977u32;
            let y = Integer::from(&n_square - 2u32);
            let (a, b) = (stored(&x, group.stride()), stored(&y, group.stride()));
            let (ao, ad, _) = layout(&[Some(&a), Some(&b)]);
            let (bo, bd, _) = layout(&[Some(&b), Some(&b)]);
            let left = BinaryColumn::new(&ao, &ad, None).unwrap();
            let right = BinaryColumn::new(&bo, &bd, None).unwrap();
            let out = group.multiply_rows(&left, &right).unwrap();
            let xy = Integer::from(&x * &y) % &n_square;
            let yy = Integer::from(&y * &y) % &n_square;
            assert_eq!(
                out,
                [stored(&xy, group.stride()), stored(&yy, group.stride())].concat()
            );
            assert_eq!(group.product(&right).unwrap(), stored(&yy, group.stride()));
            let all = group.group_products(&left, &[0, 2, 2]).unwrap();
            let one = stored(&Integer::from(1), group.stride());
            assert_eq!(all, [stored(&xy, group.stride()), one].concat());
        }
    }

    fn stored(c: &Integer, stride: usize) -> Vec<u8> {
        let mut value = vec![CIPHERTEXT_VERSION; stride];
        c.write_digits(&mut value[1..], Order::Msf);
        value
    }
}
