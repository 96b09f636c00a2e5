//! JOIN-ADJ tests: the RFC 9496 hash-to-group vectors (read from the JSON
//! file pytest also reads), re-keying, and the errors on bad input.

use super::*;
use crate::binary::layout;
use serde_json::Value;

const RFC9496: &str = include_str!("../../../../tests/crypto/vectors/ristretto255_rfc9496.json");

fn key(byte: u8) -> JoinAdjKey {
    JoinAdjKey::new(&[byte; KEY_LEN]).unwrap()
}

fn rows(out: &BinaryOutput) -> Vec<&[u8]> {
    out.offsets
        .windows(2)
        .map(|w| &out.data[w[0] as usize..w[1] as usize])
        .collect()
}

#[test]
fn rfc9496_appendix_a3_hash_to_group() {
    let doc: Value = serde_json::from_str(RFC9496).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let label = v["label"].as_str().unwrap().as_bytes();
        let input: [u8; 64] = hex::decode(v["input"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let output = hex::decode(v["output"].as_str().unwrap()).unwrap();
        let mapped = RistrettoPoint::from_uniform_bytes(&input);
        assert_eq!(mapped.compress().as_bytes().as_slice(), output);
        let hashed = RistrettoPoint::hash_from_bytes::<Sha512>(label);
        assert_eq!(hashed.compress().as_bytes().as_slice(), output);
    }
}

#[test]
fn the_value_hash_is_the_domain_then_the_value() {
    let direct = RistrettoPoint::hash_from_bytes::<Sha512>(b"veil-joinadj-v1abc");
    assert_eq!(hash_to_group(b"abc"), direct);
}

#[test]
fn rekeyed_equals_directly_keyed() {
    let (a, b) = (key(1), key(2));
    let token = Token::new(&a.token_to(&b)).unwrap();
    for value in [
        &b""[..],
        b"x",
        b"a longer value of many bytes",
        &7i64.to_le_bytes(),
    ] {
        let sealed = a.encrypt(value);
        assert_eq!(sealed.len(), CIPHERTEXT_LEN);
        assert_eq!(sealed[0], VERSION);
        assert_ne!(sealed, b.encrypt(value));
        assert_eq!(token.rekey(0, &sealed).unwrap(), b.encrypt(value));
    }
}

#[test]
fn tokens_compose() {
    let (a, b, c) = (key(1), key(2), key(3));
    let ab = Token::new(&a.token_to(&b)).unwrap();
    let bc = Token::new(&b.token_to(&c)).unwrap();
    let sealed = a.encrypt(b"value");
    let twice = bc.rekey(0, &ab.rekey(0, &sealed).unwrap()).unwrap();
    assert_eq!(twice, c.encrypt(b"value"));
    assert_eq!(
        Token::new(&a.token_to(&a))
            .unwrap()
            .rekey(0, &sealed)
            .unwrap(),
        sealed
    );
}

#[test]
fn columns_keep_nulls_and_match_single_values() {
    let (a, b) = (key(4), key(5));
    let values: [Option<&[u8]>; 4] = [Some(b"one"), None, Some(b""), Some(b"one")];
    let (offsets, data, validity) = layout(&values);
    let column = BinaryColumn::new(&offsets, &data, Some(&validity)).unwrap();
    let sealed = a.encrypt_column(&column).unwrap();
    let sealed_rows = rows(&sealed);
    assert_eq!(sealed_rows[0], a.encrypt(b"one"));
    assert!(sealed_rows[1].is_empty());
    assert_eq!(sealed_rows[2], a.encrypt(b""));
    assert_eq!(sealed_rows[0], sealed_rows[3]);

    let sealed_offsets: Vec<i64> = sealed.offsets.iter().map(|&o| i64::from(o)).collect();
    let sealed_column = BinaryColumn::new(&sealed_offsets, &sealed.data, Some(&validity)).unwrap();
    let token = Token::new(&a.token_to(&b)).unwrap();
    assert_eq!(
        token.rekey_column(&sealed_column).unwrap(),
        b.encrypt_column(&column).unwrap()
    );
}

#[test]
fn words_are_their_little_endian_bytes() {
    let a = key(6);
    let values = [0i64, -1, i64::MIN, i64::MAX, 42];
    let validity = [0b1_1101u8];
    let out = a.encrypt_words(&values, Some(&validity)).unwrap();
    let out_rows = rows(&out);
    assert!(out_rows[1].is_empty());
    for row in [0, 2, 3, 4] {
        assert_eq!(out_rows[row], a.encrypt(&values[row].to_le_bytes()));
    }
}

#[test]
fn bad_keys_tokens_and_ciphertexts_are_refused() {
    assert_eq!(
        JoinAdjKey::new(&[0; 16]).err(),
        Some(KernelError::KeyLength {
            expected: 32,
            got: 16
        })
    );
    let good = key(1).token_to(&key(2));
    let mut wrong_version = good;
    wrong_version[0] = 2;
    let mut zero = [0u8; TOKEN_LEN];
    zero[0] = VERSION;
    let mut unreduced = [0xffu8; TOKEN_LEN];
    unreduced[0] = VERSION;
    for bad in [&good[..32], &wrong_version[..], &zero[..], &unreduced[..]] {
        assert!(matches!(Token::new(bad), Err(KernelError::Parameter(_))));
    }

    let token = Token::new(&good).unwrap();
    let sealed = key(1).encrypt(b"v");
    let mut version = sealed;
    version[0] = 0;
    let mut off_curve = sealed;
    off_curve[1..].copy_from_slice(&[0xff; 32]); // not a canonical field element
    let mut identity = [0u8; CIPHERTEXT_LEN];
    identity[0] = VERSION;
    for bad in [&sealed[..32], &version[..], &off_curve[..], &identity[..]] {
        assert!(matches!(
            token.rekey(3, bad),
            Err(KernelError::Malformed { row: 3, .. })
        ));
    }
}

/// Many rows, NULLs among them: enough for every core's run and several
/// compression batches, each row equal to the unbatched `encrypt`/`rekey`.
#[test]
fn batched_columns_equal_single_values() {
    let (a, b) = (key(7), key(8));
    let values: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    let rows_in: Vec<Option<&[u8]>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| (i % 7 != 3).then_some(v.as_slice()))
        .collect();
    let (offsets, data, validity) = layout(&rows_in);
    let column = BinaryColumn::new(&offsets, &data, Some(&validity)).unwrap();
    let sealed = a.encrypt_column(&column).unwrap();
    let token = Token::new(&a.token_to(&b)).unwrap();
    for (row, value) in rows_in.iter().enumerate() {
        let got = rows(&sealed)[row];
        match value {
            Some(value) => {
                assert_eq!(got, a.encrypt(value));
                assert_eq!(token.rekey(row, got).unwrap(), b.encrypt(value));
            }
            None => assert!(got.is_empty()),
        }
    }
    let sealed_offsets: Vec<i64> = sealed.offsets.iter().map(|&o| i64::from(o)).collect();
    let sealed_column = BinaryColumn::new(&sealed_offsets, &sealed.data, Some(&validity)).unwrap();
    assert_eq!(
        token.rekey_column(&sealed_column).unwrap(),
        b.encrypt_column(&column).unwrap()
    );
}

/// A column with malformed ciphertexts in several cores' runs names the first.
#[test]
fn batched_rekey_names_the_first_malformed_row() {
    let a = key(9);
    let mut cells: Vec<Vec<u8>> = (0..600u32)
        .map(|i| a.encrypt(&i.to_le_bytes()).to_vec())
        .collect();
    cells[450][0] = 0;
    cells[200][0] = 0;
    let rows_in: Vec<Option<&[u8]>> = cells.iter().map(|c| Some(c.as_slice())).collect();
    let (offsets, data, _) = layout(&rows_in);
    let column = BinaryColumn::new(&offsets, &data, None).unwrap();
    let token = Token::new(&a.token_to(&key(10))).unwrap();
    assert!(matches!(
        token.rekey_column(&column),
        Err(KernelError::Malformed { row: 200, .. })
    ));
}
