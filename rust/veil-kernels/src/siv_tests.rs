//! AES-SIV tests: RFC 5297 Appendix A (read from the JSON file pytest also
//! reads) and the batch format over Arrow layouts.

use super::*;
use serde_json::Value;

const RFC5297: &str = include_str!("../../../tests/crypto/vectors/aes_siv_rfc5297.json");
const KEY: [u8; 32] = [7; 32];

fn unhex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

#[test]
fn rfc5297_appendix_a() {
    let doc: Value = serde_json::from_str(RFC5297).unwrap();
    for v in doc["vectors"].as_array().unwrap() {
        let key = unhex(&v["key"]);
        let headers: Vec<Vec<u8>> = v["headers"].as_array().unwrap().iter().map(unhex).collect();
        let headers: Vec<&[u8]> = headers.iter().map(Vec::as_slice).collect();
        let (pt, output) = (unhex(&v["plaintext"]), unhex(&v["output"]));
        assert_eq!(
            rfc5297_seal(&key, &headers, &pt).unwrap(),
            output,
            "{}",
            v["section"]
        );
        assert_eq!(rfc5297_open(&key, &headers, &output).unwrap(), pt);
        let mut tampered = output.clone();
        tampered[20] ^= 1;
        let err = rfc5297_open(&key, &headers, &tampered).unwrap_err();
        assert_eq!(err, KernelError::Authentication { row: 0 });
    }
}

#[test]
fn precomputed_siv_equals_the_aes_siv_crate() {
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for key_len in [32, 64] {
        let mut key = vec![0u8; key_len];
        rng.fill_bytes(&mut key);
        let fast = siv_cmac::SivNoAd::new(&key).unwrap();
        for len in 0..=100 {
            let mut message = vec![0u8; len];
            rng.fill_bytes(&mut message);
            let expected = rfc5297_seal(&key, &[], &message).unwrap();
            let (mut siv, mut body) = ([0u8; 16], message.clone());
            fast.seal(&mut siv, &mut body);
            assert_eq!([&siv[..], &body].concat(), expected, "length {len}");
            assert!(fast.open(&siv, &mut body));
            assert_eq!(body, message);
            if len > 0 {
                fast.ctr(1, &mut body); // garble
                assert!(!fast.open(&siv, &mut body));
                assert!(body.iter().all(|&b| b == 0), "no unauthenticated plaintext");
            }
        }
    }
}

/// Arrow layout of `values` (None = NULL) with i32 offsets.
fn column(values: &[Option<&[u8]>]) -> (Vec<i32>, Vec<u8>, Vec<u8>) {
    let (mut offsets, mut data, mut bits) =
        (vec![0i32], Vec::new(), vec![0u8; values.len() / 8 + 1]);
    for (row, value) in values.iter().enumerate() {
        if let Some(bytes) = value {
            data.extend_from_slice(bytes);
            bits[row / 8] |= 1 << (row % 8);
        }
        offsets.push(data.len() as i32);
    }
    (offsets, data, bits)
}

fn run(
    det: &DetBytes,
    encrypt: bool,
    offsets: &[i32],
    data: &[u8],
    validity: Option<Validity<'_>>,
) -> Result<(Vec<i64>, Vec<u8>), KernelError> {
    let input = BinaryColumn {
        offsets,
        data,
        validity,
    };
    let mut out_offsets = vec![0i64; offsets.len()];
    let mut out_data = vec![0u8; data.len() + OVERHEAD * offsets.len()];
    let out = BinaryOutput {
        offsets: &mut out_offsets,
        data: &mut out_data,
    };
    let written = if encrypt {
        det.encrypt(input, out)
    } else {
        det.decrypt(input, out)
    }?;
    out_data.truncate(written);
    Ok((out_offsets, out_data))
}

fn to_i32(offsets: &[i64]) -> Vec<i32> {
    offsets.iter().map(|&o| o as i32).collect()
}

#[test]
fn batch_round_trip_keeps_nulls_and_matches_rfc5297() {
    let det = DetBytes::new(&KEY).unwrap();
    let values: [Option<&[u8]>; 5] = [
        Some(b"alice"),
        None,
        Some(b""),
        Some(b"a longer value than one block"),
        Some(b"alice"),
    ];
    let (offsets, data, bits) = column(&values);
    let validity = Some(Validity {
        bits: &bits,
        offset: 0,
    });
    let (ct_offsets, ct) = run(&det, true, &offsets, &data, validity).unwrap();
    assert_eq!(ct_offsets[1], ct_offsets[2], "NULL gets an empty slot");
    let first = &ct[..ct_offsets[1] as usize];
    assert_eq!(first[0], VERSION);
    assert_eq!(&first[1..], rfc5297_seal(&KEY, &[], b"alice").unwrap());
    assert_eq!(first, &ct[ct_offsets[4] as usize..], "deterministic");
    let (pt_offsets, pt) = run(&det, false, &to_i32(&ct_offsets), &ct, validity).unwrap();
    assert_eq!(to_i32(&pt_offsets), offsets);
    assert_eq!(pt, data);
}

#[test]
fn sliced_input_uses_offsets_and_bit_offset() {
    let det = DetBytes::new(&KEY).unwrap();
    let values: [Option<&[u8]>; 4] = [Some(b"skip"), Some(b"x"), None, Some(b"yz")];
    let (offsets, data, bits) = column(&values);
    let validity = Some(Validity {
        bits: &bits,
        offset: 1,
    });
    let (ct_offsets, ct) = run(&det, true, &offsets[1..], &data, validity).unwrap();
    assert_eq!(ct_offsets.len(), 4);
    assert_eq!(ct_offsets[2], ct_offsets[1]);
    let sliced_bits = [0b101u8];
    let validity = Some(Validity {
        bits: &sliced_bits,
        offset: 0,
    });
    let (_, pt) = run(&det, false, &to_i32(&ct_offsets), &ct, validity).unwrap();
    assert_eq!(pt, b"xyz");
}

#[test]
fn wrong_key_tampering_and_malformed_inputs_fail() {
    let det = DetBytes::new(&KEY).unwrap();
    let (offsets, data, _) = column(&[Some(b"ok"), Some(b"secret")]);
    let (ct_offsets, ct) = run(&det, true, &offsets, &data, None).unwrap();
    let ct_offsets = to_i32(&ct_offsets);
    let other = DetBytes::new(&[8; 32]).unwrap();
    let err = run(&other, false, &ct_offsets, &ct, None).unwrap_err();
    assert_eq!(err, KernelError::Authentication { row: 0 });
    let mut tampered = ct.clone();
    *tampered.last_mut().unwrap() ^= 0x80;
    let err = run(&det, false, &ct_offsets, &tampered, None).unwrap_err();
    assert_eq!(err, KernelError::Authentication { row: 1 });
    let mut bad_version = ct.clone();
    bad_version[0] = 0x02;
    let err = run(&det, false, &ct_offsets, &bad_version, None).unwrap_err();
    assert!(
        matches!(err, KernelError::Malformed { row: 0, ref reason } if reason.contains("0x02"))
    );
    let err = run(&det, false, &[0, 5], &ct, None).unwrap_err();
    assert!(matches!(err, KernelError::Malformed { row: 0, .. }));
    assert!(DetBytes::new(&[0; 16]).is_err());
}
