//! Behaviour of BCLO order-preserving encryption (`veil_kernels::ope`).

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use veil_kernels::ope::Ope;
use veil_kernels::KernelError;

const KEY: [u8; 32] = [7; 32];

fn encrypt(ope: &mut Ope, v: i128) -> u128 {
    let point = ope.point_of(v).expect("in domain");
    ope.encrypt_point(point)
}

#[test]
fn small_domains_are_mapped_strictly_increasingly_and_back() {
    for bits in 1..=10 {
        for signed in [false, true] {
            let mut ope = Ope::new(&KEY, bits, signed).unwrap();
            let cs: Vec<u128> = (0..1u64 << bits).map(|p| ope.encrypt_point(p)).collect();
            assert!(cs.windows(2).all(|w| w[0] < w[1]), "bits={bits}");
            assert!(cs.iter().all(|&c| c >> ope.cipher_bits() == 0));
            let mut fresh = Ope::new(&KEY, bits, signed).unwrap();
            for (p, &c) in cs.iter().enumerate() {
                assert_eq!(fresh.decrypt_point(c), Some(p as u64));
            }
        }
    }
}

#[test]
fn random_pairs_keep_their_order_in_wide_domains() {
    let mut rng = ChaCha20Rng::from_seed([1; 32]);
    for (bits, signed) in [(32, true), (64, false), (64, true), (48, true)] {
        let mut ope = Ope::new(&KEY, bits, signed).unwrap();
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        let mut points: Vec<u64> = (0..300).map(|_| rng.next_u64() & mask).collect();
        points.extend([0, 1, mask - 1, mask, mask / 2, mask / 2 + 1]);
        points.sort_unstable();
        points.dedup();
        let cs: Vec<u128> = points.iter().map(|&p| ope.encrypt_point(p)).collect();
        assert!(cs.windows(2).all(|w| w[0] < w[1]), "bits={bits}");
        let mut fresh = Ope::new(&KEY, bits, signed).unwrap();
        for (&p, &c) in points.iter().zip(&cs) {
            assert_eq!(fresh.decrypt_point(c), Some(p));
        }
    }
}

#[test]
fn signed_domains_order_negatives_first() {
    let mut ope = Ope::new(&KEY, 64, true).unwrap();
    let values = [i64::MIN as i128, -2, -1, 0, 1, i64::MAX as i128];
    let cs: Vec<u128> = values.iter().map(|&v| encrypt(&mut ope, v)).collect();
    assert!(cs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(ope.point_of(i64::MAX as i128 + 1), None);
    assert_eq!(ope.point_of(i64::MIN as i128 - 1), None);
}

#[test]
fn narrower_ranges_keep_order_and_round_trip() {
    let mut rng = ChaCha20Rng::from_seed([2; 32]);
    for (bits, cipher_bits) in [(25, 41), (32, 48), (8, 9), (1, 2)] {
        let mut ope = Ope::with_cipher_bits(&KEY, bits, cipher_bits, true).unwrap();
        assert_eq!(ope.cipher_bits(), cipher_bits);
        let mask = (1u64 << bits) - 1;
        let mut points: Vec<u64> = (0..300).map(|_| rng.next_u64() & mask).collect();
        points.extend([0, mask, mask / 2, mask / 2 + 1]);
        points.sort_unstable();
        points.dedup();
        let cs: Vec<u128> = points.iter().map(|&p| ope.encrypt_point(p)).collect();
        assert!(cs.windows(2).all(|w| w[0] < w[1]), "bits={bits}");
        assert!(cs.iter().all(|&c| c >> cipher_bits == 0), "bits={bits}");
        let mut fresh = Ope::with_cipher_bits(&KEY, bits, cipher_bits, true).unwrap();
        for (&p, &c) in points.iter().zip(&cs) {
            assert_eq!(fresh.decrypt_point(c), Some(p));
        }
        assert_eq!(fresh.decrypt_point(1 << cipher_bits), None);
    }
    for (bits, cipher_bits) in [(25, 25), (25, 24), (64, 97)] {
        let refused = Ope::with_cipher_bits(&KEY, bits, cipher_bits, true);
        assert!(
            matches!(refused, Err(KernelError::Parameter(_))),
            "{bits} {cipher_bits}"
        );
    }
}

#[test]
fn cached_and_fresh_encryptions_agree() {
    let mut warm = Ope::new(&KEY, 32, true).unwrap();
    let first: Vec<u128> = (-50..50)
        .map(|v| encrypt(&mut warm, v * 1_000_003))
        .collect();
    let again: Vec<u128> = (-50..50)
        .map(|v| encrypt(&mut warm, v * 1_000_003))
        .collect();
    let mut cold = Ope::new(&KEY, 32, true).unwrap();
    let fresh: Vec<u128> = (-50..50)
        .rev()
        .map(|v| encrypt(&mut cold, v * 1_000_003))
        .collect();
    assert_eq!(first, again);
    assert_eq!(first, fresh.into_iter().rev().collect::<Vec<_>>());
}

#[test]
fn keys_signedness_and_widths_give_different_maps() {
    let c = |key: [u8; 32], bits, signed| Ope::new(&key, bits, signed).unwrap().encrypt_point(5);
    let base = c(KEY, 32, true);
    assert_ne!(base, c([8; 32], 32, true));
    assert_ne!(base, c(KEY, 32, false));
    assert_ne!(base, c(KEY, 31, true));
}

#[test]
fn invalid_ciphertexts_are_rejected() {
    let mut ope = Ope::new(&KEY, 32, true).unwrap();
    let c = encrypt(&mut ope, 12345);
    let mut fresh = Ope::new(&KEY, 32, true).unwrap();
    assert_eq!(fresh.decrypt_point(c + 1), None);
    assert_eq!(fresh.decrypt_point(c - 1), None);
    assert_eq!(fresh.decrypt_point(1 << 63), None);
    let mut other = Ope::new(&[9; 32], 32, true).unwrap();
    assert_eq!(other.decrypt_point(c), None);
}

#[test]
fn columns_report_the_failing_row() {
    let mut ope = Ope::new(&KEY, 16, true).unwrap();
    let mut out = [0u128; 3];
    let err = ope
        .encrypt_column(&[1i64, 40_000, 3], None, &mut out)
        .unwrap_err();
    assert!(matches!(err, KernelError::Domain { row: 1, .. }), "{err}");
    assert!(err.to_string().contains("[-32768, 32767]"), "{err}");
    // Rows marked invalid (NULL) are skipped, whatever they hold.
    ope.encrypt_column(&[1i64, 40_000, 3], Some(&[true, false, true]), &mut out)
        .unwrap();
    let mut back = [0i128; 3];
    let cs = out.iter().map(|&c| Some(c));
    ope.decrypt_column(cs, Some(&[true, false, true]), &mut back)
        .unwrap();
    assert_eq!(back, [1, 0, 3]);
    let short_mask = ope.encrypt_column(&[1i64, 2], Some(&[true]), &mut out[..2]);
    assert!(matches!(short_mask, Err(KernelError::Parameter(_))));
    let bad = [Some(out[0]), None];
    let err = ope
        .decrypt_column(bad.into_iter(), None, &mut back[..2])
        .unwrap_err();
    assert!(matches!(err, KernelError::Malformed { row: 1, .. }));
}

#[test]
fn binary_form_round_trips_and_sorts_bytewise() {
    let mut ope = Ope::new(&KEY, 64, true).unwrap();
    assert_eq!((ope.cipher_bits(), ope.binary_width()), (96, 13));
    let cs: Vec<Vec<u8>> = [-5i128, 0, 7]
        .iter()
        .map(|&v| {
            let mut out = vec![0u8; 13];
            let c = encrypt(&mut ope, v);
            ope.write_binary(c, &mut out);
            assert_eq!(ope.read_binary(&out), Some(c));
            out
        })
        .collect();
    assert!(cs.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(ope.read_binary(&cs[0][1..]), None);
    let mut wrong_version = cs[0].clone();
    wrong_version[0] = 2;
    assert_eq!(ope.read_binary(&wrong_version), None);
}

#[test]
fn parameters_are_checked() {
    assert!(matches!(
        Ope::new(&KEY, 0, true),
        Err(KernelError::Parameter(_))
    ));
    assert!(matches!(
        Ope::new(&KEY, 65, true),
        Err(KernelError::Parameter(_))
    ));
    assert!(matches!(
        Ope::new(&KEY[..16], 8, true),
        Err(KernelError::KeyLength { .. })
    ));
}

#[test]
#[ignore = "timing probe: cargo test --release --test ope -- --ignored --nocapture"]
fn timing_probe() {
    let mut rng = ChaCha20Rng::from_seed([2; 32]);
    for bits in [32, 64] {
        let mut ope = Ope::new(&KEY, bits, true).unwrap();
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        let points: Vec<u64> = (0..100_000).map(|_| rng.next_u64() & mask).collect();
        let start = std::time::Instant::now();
        let cs: Vec<u128> = points.iter().map(|&p| ope.encrypt_point(p)).collect();
        let fresh = start.elapsed().as_secs_f64();
        let mut other = Ope::new(&KEY, bits, true).unwrap();
        let start = std::time::Instant::now();
        let n = cs
            .iter()
            .filter(|&&c| other.decrypt_point(c).is_some())
            .count();
        let dec = start.elapsed().as_secs_f64();
        println!(
            "bits {bits}: fresh {:.0}/s decrypt {:.0}/s ({n})",
            1e5 / fresh,
            1e5 / dec
        );
    }
}

/// The cases of tests/crypto/vectors/ope_regression.json (also run by pytest), read
/// with a scanner for that file's fixed layout rather than a JSON dependency.
#[test]
fn regression_vectors_still_hold() {
    let text = include_str!("../../../tests/crypto/vectors/ope_regression.json");
    let key = hex::decode(field(text, "key_hex").trim_matches('"')).unwrap();
    let cases: Vec<&str> = text.split("\"bits\":").skip(1).collect();
    assert_eq!(cases.len(), 8);
    for case in cases {
        let bits: u32 = case[..case.find(',').unwrap()].trim().parse().unwrap();
        let signed = field(case, "signed") == "true";
        let mut ope = Ope::new(&key, bits, signed).unwrap();
        let plaintexts = strings(case, "plaintexts");
        let ciphertexts = strings(case, "ciphertexts");
        assert_eq!(plaintexts.len(), ciphertexts.len());
        for (p, c) in plaintexts.iter().zip(ciphertexts) {
            let got = encrypt(&mut ope, p.parse().unwrap());
            let got = if ope.cipher_bits() <= 63 {
                got.to_string()
            } else {
                let mut out = vec![0u8; ope.binary_width()];
                ope.write_binary(got, &mut out);
                hex::encode(out)
            };
            assert_eq!(got, c, "bits={bits} signed={signed} plaintext={p}");
        }
    }
}

fn field<'a>(text: &'a str, name: &str) -> &'a str {
    let start = text.find(&format!("\"{name}\":")).unwrap() + name.len() + 3;
    let end = start + text[start..].find([',', '\n']).unwrap();
    text[start..end].trim()
}

fn strings<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let start = text.find(&format!("\"{name}\": [")).unwrap() + name.len() + 5;
    let end = start + text[start..].find(']').unwrap();
    text[start..end]
        .split(',')
        .map(|s| s.trim().trim_matches('"'))
        .collect()
}

#[test]
fn interleaved_descents_match_independent_ones() {
    // Descents resume from the previous path; mixing plaintext, ciphertext
    // and invalid descents in any order must not change any answer.
    let mut rng = ChaCha20Rng::from_seed([5; 32]);
    let points: Vec<u64> = (0..200)
        .map(|_| rng.next_u64() % 5000 + (1 << 40))
        .collect();
    let reference: Vec<u128> = points
        .iter()
        .map(|&p| Ope::new(&KEY, 48, false).unwrap().encrypt_point(p))
        .collect();
    let mut mixed = Ope::new(&KEY, 48, false).unwrap();
    for (i, (&p, &c)) in points.iter().zip(&reference).enumerate() {
        assert_eq!(mixed.decrypt_point(c + 1 + i as u128 % 3), None);
        assert_eq!(mixed.encrypt_point(p), c);
        let mut other = Ope::new(&KEY, 48, false).unwrap();
        assert_eq!(other.decrypt_point(c), Some(p));
    }
}
