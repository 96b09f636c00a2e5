//! FF1 tests: NIST's published samples (read from the same JSON file pytest
//! reads), the binary batch path against the general path, and a cross-check
//! against the independent `fpe` crate.

use super::*;
use aes::Aes128;
use fpe::ff1::{FlexibleNumeralString, FF1};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

const NIST_SAMPLES: &str = include_str!("../../../tests/crypto/vectors/ff1_nist_sp800_38g.json");

fn to_numerals(alphabet: &str, text: &str) -> Vec<u16> {
    text.chars()
        .map(|c| alphabet.find(c).expect("numeral in alphabet") as u16)
        .collect()
}

#[test]
fn nist_sp800_38g_samples() {
    let doc: Value = serde_json::from_str(NIST_SAMPLES).unwrap();
    let alphabet = doc["alphabet"].as_str().unwrap();
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 9);
    for v in vectors {
        let field = |name: &str| v[name].as_str().unwrap();
        let ff1 = Ff1::new(&hex::decode(field("key")).unwrap()).unwrap();
        let radix = v["radix"].as_u64().unwrap() as u32;
        let tweak = hex::decode(field("tweak")).unwrap();
        let pt = to_numerals(alphabet, field("plaintext"));
        let ct = to_numerals(alphabet, field("ciphertext"));
        assert_eq!(
            ff1.encrypt(radix, &tweak, &pt).unwrap(),
            ct,
            "sample {}",
            v["sample"]
        );
        assert_eq!(
            ff1.decrypt(radix, &tweak, &ct).unwrap(),
            pt,
            "sample {}",
            v["sample"]
        );
    }
}

/// The numeral string of a signed value as `Ff1Binary` defines it.
fn bits_of(value: i64, bits: u32) -> Vec<u16> {
    let numeral = (value as u64 & (u64::MAX >> (64 - bits))) ^ (1 << (bits - 1));
    (0..bits)
        .rev()
        .map(|i| ((numeral >> i) & 1) as u16)
        .collect()
}

fn random_in_domain(rng: &mut ChaCha8Rng, bits: u32) -> i64 {
    let shift = 64 - bits;
    ((rng.next_u64() << shift) as i64) >> shift
}

#[test]
fn binary_batch_equals_general_ff1() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for bits in [20, 21, 31, 32, 33, 47, 63, 64] {
        for key_len in [16, 24, 32] {
            let mut key = vec![0u8; key_len];
            rng.fill_bytes(&mut key);
            let tweak: &[u8] = if bits % 2 == 0 {
                b""
            } else {
                b"a tweak longer than one block"
            };
            let general = Ff1::new(&key).unwrap();
            let batch = Ff1Binary::new(&key, bits, tweak).unwrap();
            let values: Vec<i64> = (0..300).map(|_| random_in_domain(&mut rng, bits)).collect();
            let mut out = vec![0i64; values.len()];
            batch.encrypt(&values, &mut out).unwrap();
            for (&x, &y) in values.iter().zip(&out) {
                let expected = general.encrypt(2, tweak, &bits_of(x, bits)).unwrap();
                assert_eq!(bits_of(y, bits), expected, "bits {bits}, value {x}");
            }
            let mut back = vec![0i64; values.len()];
            batch.decrypt(&out, &mut back).unwrap();
            assert_eq!(back, values);
        }
    }
}

#[test]
fn matches_the_fpe_crate() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut key = [0u8; 16];
    for (radix, len) in [(2u32, 64usize), (2, 23), (10, 19), (36, 24), (65536, 6)] {
        rng.fill_bytes(&mut key);
        let reference = FF1::<Aes128>::new(&key, radix).unwrap();
        let ours = Ff1::new(&key).unwrap();
        for _ in 0..20 {
            let x: Vec<u16> = (0..len).map(|_| (rng.next_u32() % radix) as u16).collect();
            let expected: Vec<u16> = reference
                .encrypt(b"tw", &FlexibleNumeralString::from(x.clone()))
                .unwrap()
                .into();
            assert_eq!(ours.encrypt(radix, b"tw", &x).unwrap(), expected);
        }
    }
}

#[test]
fn domain_edges_round_trip_in_i32_and_i64() {
    for bits in [20u32, 32, 64] {
        let batch = Ff1Binary::new(&[9; 16], bits, b"").unwrap();
        let (min, max) = batch.range();
        let values = vec![min, min + 1, -1, 0, 1, max - 1, max];
        let mut ct = vec![0i64; values.len()];
        batch.encrypt(&values, &mut ct).unwrap();
        assert!(ct.iter().all(|&c| c >= min && c <= max));
        let mut back = vec![0i64; values.len()];
        batch.decrypt(&ct, &mut back).unwrap();
        assert_eq!(back, values);
        if bits <= 32 {
            let narrow: Vec<i32> = values.iter().map(|&v| v as i32).collect();
            let mut ct32 = vec![0i32; values.len()];
            batch.encrypt(&narrow, &mut ct32).unwrap();
            assert!(ct32.iter().zip(&ct).all(|(&a, &b)| i64::from(a) == b));
        }
    }
}

#[test]
fn out_of_domain_names_the_row() {
    let batch = Ff1Binary::new(&[1; 16], 32, b"").unwrap();
    let mut values = vec![0i64; 600];
    values[517] = 1 << 31;
    let mut out = vec![0i64; values.len()];
    match batch.encrypt(&values, &mut out).unwrap_err() {
        KernelError::Domain { row, domain } => {
            assert_eq!(row, 517);
            assert!(domain.contains("-2147483648") && domain.contains("2147483647"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = batch.decrypt(&values, &mut out).unwrap_err();
    assert!(matches!(err, KernelError::Malformed { row: 517, .. }));
}

#[test]
fn rejects_bad_parameters() {
    assert!(Ff1Binary::new(&[0; 16], 19, b"").is_err());
    assert!(Ff1Binary::new(&[0; 16], 65, b"").is_err());
    assert!(Ff1Binary::new(&[0; 15], 32, b"").is_err());
    let wide = Ff1Binary::new(&[0; 16], 40, b"").unwrap();
    let mut narrow = [0i32; 1];
    assert!(wide.encrypt(&[0i64], &mut narrow).is_err());
    let ff1 = Ff1::new(&[0; 16]).unwrap();
    assert!(
        ff1.encrypt(10, b"", &[1, 2, 3]).is_err(),
        "domain below one million"
    );
    assert!(
        ff1.encrypt(10, b"", &[0; 60]).is_err(),
        "halves wider than 96 bits"
    );
    assert!(
        ff1.encrypt(10, b"", &[10; 8]).is_err(),
        "numeral not below the radix"
    );
}
