//! ASHE tests: the known answers in `tests/crypto/vectors/ashe.json` (produced by
//! the independent Python reference that pytest also checks them against),
//! and the algebra the fast paths must preserve.

use super::*;
use serde_json::Value;

const VECTORS: &str = include_str!("../../../../tests/crypto/vectors/ashe.json");
const KEY: [u8; 32] = [9; 32];

fn u64s(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .expect("array")
        .iter()
        .map(|v| v.as_u64().expect("u64"))
        .collect()
}

fn vectors() -> (Ashe, Value) {
    let document: Value = serde_json::from_str(VECTORS).expect("vector file is JSON");
    assert_eq!(document["version"].as_u64(), Some(u64::from(VERSION)));
    let key = hex::decode(document["key"].as_str().unwrap()).unwrap();
    (Ashe::new(&key).unwrap(), document)
}

/// The pad sum as a plain loop over single pads: what every fast path must equal.
fn slow_pad_sum(ashe: &Ashe, ids: impl IntoIterator<Item = u64>) -> u64 {
    ids.into_iter()
        .fold(0u64, |sum, id| sum.wrapping_add(ashe.pad(id)))
}

#[test]
fn prf_and_pads_match_the_vectors() {
    let (ashe, document) = vectors();
    for case in document["prf"].as_array().unwrap() {
        let id = case["id"].as_u64().unwrap();
        assert_eq!(ashe.prf(id), case["f"].as_u64().unwrap(), "F({id})");
    }
    for case in document["pads"].as_array().unwrap() {
        let id = case["id"].as_u64().unwrap();
        assert_eq!(ashe.pad(id), case["pad"].as_u64().unwrap(), "pad({id})");
    }
}

#[test]
fn encryptions_match_the_vectors() {
    let (ashe, document) = vectors();
    for case in document["encryptions"].as_array().unwrap() {
        let ids = u64s(&case["ids"]);
        let values: Vec<i64> = case["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        let ciphertexts = ashe.encrypt(&ids, &values).unwrap();
        assert_eq!(ciphertexts, u64s(&case["ciphertexts"]), "{ids:?}");
        let mut back = vec![0; ids.len()];
        ashe.decrypt_into(&ids, &ciphertexts, &mut back).unwrap();
        assert_eq!(back, values);
    }
}

#[test]
fn pad_sums_match_the_vectors() {
    let (ashe, document) = vectors();
    let sums = &document["pad_sums"];
    for case in sums["ids"].as_array().unwrap() {
        let ids = u64s(&case["ids"]);
        assert_eq!(ashe.pad_sum_ids(&ids), case["pad_sum"].as_u64().unwrap());
    }
    for case in sums["runs"].as_array().unwrap() {
        let runs: Vec<[u64; 2]> = case["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|run| u64s(run).try_into().expect("a run is [start, end]"))
            .collect();
        assert_eq!(ashe.pad_sum_runs(&runs), case["pad_sum"].as_u64().unwrap());
    }
    for case in sums["bitmaps"].as_array().unwrap() {
        let base = case["base"].as_u64().unwrap();
        let words = u64s(&case["words"]);
        assert_eq!(
            ashe.pad_sum_bitmap(base, &words),
            case["pad_sum"].as_u64().unwrap()
        );
    }
}

#[test]
fn batch_pads_equal_single_pads_across_chunks_and_gaps() {
    let ashe = Ashe::new(&KEY).unwrap();
    // Runs that straddle the batch boundary, gaps, repeats, descending ids
    // and both ends of the cycle.
    let mut ids: Vec<u64> = (1000..1000 + 3 * BATCH as u64 + 7).collect();
    ids.extend([5, 4, 4, 3, u64::MAX - 1, u64::MAX, 0, 1, 77, 79]);
    let values: Vec<i64> = (0..ids.len() as i64).map(|v| v * 31 - 500).collect();
    let ciphertexts = ashe.encrypt(&ids, &values).unwrap();
    for ((&id, &value), &c) in ids.iter().zip(&values).zip(&ciphertexts) {
        assert_eq!(c, (value as u64).wrapping_add(ashe.pad(id)), "id {id}");
        assert_eq!(
            ashe.pad(id),
            ashe.prf(id).wrapping_sub(ashe.prf(id.wrapping_sub(1)))
        );
    }
}

#[test]
fn sums_of_ciphertexts_decrypt_to_sums_of_values() {
    let ashe = Ashe::new(&KEY).unwrap();
    let ids: Vec<u64> = (40..340).chain(900..950).collect();
    let values: Vec<i64> = ids
        .iter()
        .map(|&i| (i as i64 % 17 - 8) * 1_000_003)
        .collect();
    let ciphertexts = ashe.encrypt(&ids, &values).unwrap();
    let total = ciphertexts.iter().fold(0u64, |s, &c| s.wrapping_add(c));
    let pads = ashe.pad_sum_ids(&ids);
    assert_eq!(total.wrapping_sub(pads) as i64, values.iter().sum::<i64>());
    assert_eq!(ashe.pad_sum_runs(&[[40, 339], [900, 949]]), pads);
}

#[test]
fn runs_telescope_to_their_end_pads() {
    let ashe = Ashe::new(&KEY).unwrap();
    for (start, end) in [
        (0u64, 0u64),
        (0, 300),
        (u64::MAX - 3, u64::MAX),
        (u64::MAX - 2, 2),
    ] {
        let expected = ashe.prf(end).wrapping_sub(ashe.prf(start.wrapping_sub(1)));
        assert_eq!(ashe.pad_sum_runs(&[[start, end]]), expected);
        let length = end.wrapping_sub(start).wrapping_add(1);
        let ids = (0..length).map(|k| start.wrapping_add(k));
        assert_eq!(slow_pad_sum(&ashe, ids.clone()), expected);
        assert_eq!(ashe.pad_sum_ids(&ids.collect::<Vec<_>>()), expected);
    }
    // id 0's predecessor is 2^64 − 1: the cycle has no special case.
    assert_eq!(ashe.pad(0), ashe.prf(0).wrapping_sub(ashe.prf(u64::MAX)));
}

#[test]
fn unsorted_and_repeated_ids_sum_every_occurrence() {
    let ashe = Ashe::new(&KEY).unwrap();
    let ids = [9u64, 3, 4, 5, 5, 2, u64::MAX, 0, 1, 200, 8];
    assert_eq!(ashe.pad_sum_ids(&ids), slow_pad_sum(&ashe, ids));
    assert_eq!(ashe.pad_sum_ids(&[]), 0);
    assert_eq!(ashe.pad_sum_runs(&[]), 0);
    assert_eq!(ashe.pad_sum_bitmap(7, &[]), 0);
}

#[test]
fn bitmaps_sum_the_ids_of_their_set_bits() {
    let ashe = Ashe::new(&KEY).unwrap();
    let words_cases: [&[u64]; 7] = [
        &[0],
        &[1],
        &[u64::MAX],
        &[u64::MAX, u64::MAX, 1],
        &[1 << 63, 1, 0, 1 << 63],
        &[
            0x0f0f_0000_ffff_0001,
            0x8000_0000_0000_0003,
            u64::MAX,
            0x7fff_ffff_ffff_fffe,
        ],
        &[0xdead_beef_0123_4567, 0, 0xffff_ffff_0000_0000, 0x1],
    ];
    for base in [0u64, 1000, u64::MAX - 70] {
        for words in words_cases {
            let ids = set_bits(base, words);
            assert_eq!(
                ashe.pad_sum_bitmap(base, words),
                slow_pad_sum(&ashe, ids),
                "base {base} words {words:x?}"
            );
        }
    }
}

#[test]
fn block_pad_sums_equal_one_bitmap_per_row() {
    let ashe = Ashe::new(&KEY).unwrap();
    // enough rows and runs to fill several AES batches, with empty and full masks
    let mut masks = vec![0u64, u64::MAX, 1, 1 << 63, 0x8000_0000_0000_0001];
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        masks.push(state);
    }
    let bases: Vec<u64> = (0..masks.len() as u64)
        .map(|r| (r * 64).wrapping_add(u64::MAX - 200))
        .collect();
    let mut out = vec![7; masks.len()];
    ashe.pad_sums_blocks(&bases, &masks, &mut out).unwrap();
    for ((&base, &mask), &got) in bases.iter().zip(&masks).zip(&out) {
        assert_eq!(
            got,
            ashe.pad_sum_bitmap(base, &[mask]),
            "base {base} mask {mask:x}"
        );
    }
    assert!(ashe.pad_sums_blocks(&bases, &masks[1..], &mut out).is_err());
}

fn set_bits(base: u64, words: &[u64]) -> Vec<u64> {
    let mut ids = Vec::new();
    for (w, &word) in words.iter().enumerate() {
        for bit in 0..64 {
            if word >> bit & 1 == 1 {
                ids.push(base.wrapping_add(w as u64 * 64 + bit));
            }
        }
    }
    ids
}

#[test]
fn wrong_key_and_mismatched_lengths_are_refused() {
    assert_eq!(
        Ashe::new(&[0; 16]).err(),
        Some(KernelError::KeyLength {
            expected: 32,
            got: 16
        })
    );
    let ashe = Ashe::new(&KEY).unwrap();
    let err = ashe.encrypt(&[1, 2], &[5]).unwrap_err();
    assert!(matches!(err, KernelError::Parameter(_)));
    let mut out = [0i64; 1];
    assert!(ashe.decrypt_into(&[1, 2], &[3, 4], &mut out).is_err());
}

#[test]
fn block_layout_is_domain_byte_then_big_endian_id() {
    let bytes: [u8; 16] = block(0x0102_0304_0506_0708).into();
    assert_eq!(
        bytes,
        [1, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        "DOMAIN_PAD || 0^7 || id big-endian"
    );
}
