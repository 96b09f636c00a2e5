//! Row-bound RND: round trips, the block layout, and the keystream a plain
//! AES-256 computation gives (the Python tests check the same against the
//! `cryptography` package).

use super::*;
use aes::cipher::KeyInit;

const KEY: [u8; 32] = [7; 32];

#[test]
fn words_round_trip_and_differ_per_id() {
    let rnd = RowRnd::new(&KEY).unwrap();
    let ids: Vec<u64> = (0..1500).map(|i| i * 3 + u64::MAX - 2000).collect();
    let values: Vec<u64> = (0..1500).map(|i| i % 7).collect();
    let mut sealed = vec![0; ids.len()];
    rnd.xor_words(&ids, &values, &mut sealed).unwrap();
    assert_ne!(sealed[0], sealed[7]); // equal values, different ids
    let mut opened = vec![0; ids.len()];
    rnd.xor_words(&ids, &sealed, &mut opened).unwrap();
    assert_eq!(opened, values);
    assert!(rnd.xor_words(&ids[1..], &values, &mut opened).is_err());
}

#[test]
fn a_word_is_the_first_eight_bytes_of_aes_of_block_zero() {
    let rnd = RowRnd::new(&KEY).unwrap();
    let mut expected = [block(42, 0)];
    Aes256::new_from_slice(&KEY)
        .unwrap()
        .encrypt_blocks(&mut expected);
    let mut out = [0u64];
    rnd.xor_words(&[42], &[0], &mut out).unwrap();
    assert_eq!(out[0], prf_output(&expected[0]));
}

#[test]
fn binary_values_keep_their_length_and_round_trip() {
    let rnd = RowRnd::new(&KEY).unwrap();
    let values: [&[u8]; 4] = [b"", b"short", &[0xab; 16], &[0x5a; 47]];
    let mut offsets = vec![0i64];
    let mut data = Vec::new();
    for value in values {
        data.extend_from_slice(value);
        offsets.push(data.len() as i64);
    }
    let ids = [5u64, 6, 7, 8];
    let column = BinaryColumn::new(&offsets, &data, None).unwrap();
    let sealed = rnd.xor_column(&ids, &column).unwrap();
    let sealed_offsets: Vec<i64> = sealed.offsets.iter().map(|&o| i64::from(o)).collect();
    assert_eq!(sealed_offsets, offsets);
    assert_ne!(&sealed.data[5..21], &data[5..21]);
    let again = BinaryColumn::new(&sealed_offsets, &sealed.data, None).unwrap();
    assert_eq!(rnd.xor_column(&ids, &again).unwrap().data, data);
}

#[test]
fn block_layout_is_domain_counter_then_id() {
    let bytes: [u8; 16] = block(0x0102_0304_0506_0708, 9).into();
    assert_eq!(bytes, [2, 0, 0, 0, 0, 0, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8]);
}

#[test]
fn rexor_is_a_decrypt_under_old_ids_then_an_encrypt_under_new_ones() {
    let rnd = RowRnd::new(&KEY).unwrap();
    let (from, to) = ([3u64, 9, 27], [100u64, 101, 102]);
    let values = [1u64, 1 << 63, 42];
    let (mut opened, mut twice, mut once) = ([0u64; 3], [0u64; 3], [0u64; 3]);
    rnd.xor_words(&from, &values, &mut opened).unwrap();
    rnd.xor_words(&to, &opened, &mut twice).unwrap();
    rnd.rexor_words(&from, &to, &values, &mut once).unwrap();
    assert_eq!(once, twice);
    assert!(rnd
        .rexor_words(&from[1..], &to, &values, &mut once)
        .is_err());

    let data: Vec<u8> = (0..40).collect();
    let offsets = [0i64, 0, 17, 40];
    let column = BinaryColumn::new(&offsets, &data, Some(&[0b101])).unwrap();
    let opened = rnd.xor_column(&from, &column).unwrap();
    let opened_offsets: Vec<i64> = opened.offsets.iter().map(|&o| i64::from(o)).collect();
    let middle = BinaryColumn::new(&opened_offsets, &opened.data, Some(&[0b101])).unwrap();
    let twice = rnd.xor_column(&to, &middle).unwrap();
    let once = rnd.rexor_column(&from, &to, &column).unwrap();
    assert_eq!(once.data, twice.data);
    assert_eq!(once.offsets, twice.offsets);
    assert!(rnd.rexor_column(&from, &to[1..], &column).is_err());
}
