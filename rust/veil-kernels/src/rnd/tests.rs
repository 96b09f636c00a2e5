use super::*;
use crate::binary::{layout, non_empty_rows, BinaryColumn};

const VECTORS: &str = include_str!("../../../../tests/crypto/vectors/aes_gcm_256.json");

fn hex_field(case: &serde_json::Value, name: &str) -> Vec<u8> {
    hex::decode(case[name].as_str().expect("hex string")).expect("valid hex")
}

/// Encrypt a list of values as one column (None = NULL).
fn encrypt(rnd: &Rnd, values: &[Option<&[u8]>], aad: &[u8]) -> Result<BinaryOutput, KernelError> {
    let (offsets, data, validity) = layout(values);
    let column = BinaryColumn::new(&offsets, &data, Some(&validity))?;
    rnd.encrypt_column(&column, aad)
}

/// Decrypt a column in which every empty row is NULL.
fn decrypt(rnd: &Rnd, sealed: &BinaryOutput, aad: &[u8]) -> Result<BinaryOutput, KernelError> {
    let offsets: Vec<i64> = sealed.offsets.iter().map(|&o| o.into()).collect();
    let validity = non_empty_rows(&offsets);
    let column = BinaryColumn::new(&offsets, &sealed.data, Some(&validity))?;
    rnd.decrypt_column(&column, aad)
}

#[test]
fn gcm_specification_vectors() {
    let document: serde_json::Value = serde_json::from_str(VECTORS).expect("vector file is JSON");
    let cases = document["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 4);
    for case in cases {
        let rnd = Rnd::new(&hex_field(case, "key")).unwrap();
        let sealed = rnd
            .encrypt_with_nonce_for_tests(
                &hex_field(case, "nonce"),
                &hex_field(case, "aad"),
                &hex_field(case, "plaintext"),
            )
            .unwrap();
        let mut expected = hex_field(case, "ciphertext");
        expected.extend(hex_field(case, "tag"));
        assert_eq!(sealed, expected, "{}", case["name"]);
    }
}

#[test]
fn round_trip_keeps_nulls_and_empty_values() {
    let rnd = Rnd::new(&[7u8; 32]).unwrap();
    let values: [Option<&[u8]>; 4] = [Some(b"alice"), None, Some(b""), Some(&[0u8; 40])];
    let sealed = encrypt(&rnd, &values, b"t.c").unwrap();
    assert_eq!(sealed.offsets, vec![0, 34, 34, 63, 132]);
    assert_eq!(sealed.data[0], VERSION);
    let opened = decrypt(&rnd, &sealed, b"t.c").unwrap();
    assert_eq!(opened.offsets, vec![0, 5, 5, 5, 45]);
    assert_eq!(&opened.data[..5], b"alice");
}

#[test]
fn equal_plaintexts_get_different_ciphertexts() {
    let rnd = Rnd::new(&[7u8; 32]).unwrap();
    let sealed = encrypt(&rnd, &[Some(b"same"), Some(b"same")], b"").unwrap();
    assert_ne!(sealed.data[..33], sealed.data[33..]);
}

#[test]
fn wrong_key_context_or_tampering_fail_authentication() {
    let rnd = Rnd::new(&[7u8; 32]).unwrap();
    let sealed = encrypt(&rnd, &[Some(b"x"), Some(b"secret")], b"t.c").unwrap();
    let other = Rnd::new(&[8u8; 32]).unwrap();
    let auth = |row| Err(KernelError::Authentication { row });
    assert_eq!(decrypt(&other, &sealed, b"t.c"), auth(0));
    assert_eq!(decrypt(&rnd, &sealed, b"t.d"), auth(0));
    let mut tampered = BinaryOutput {
        offsets: sealed.offsets.clone(),
        data: sealed.data.clone(),
    };
    let last = tampered.data.len() - 1;
    tampered.data[last] ^= 1;
    assert_eq!(decrypt(&rnd, &tampered, b"t.c"), auth(1));
}

#[test]
fn truncated_or_unknown_versions_are_malformed() {
    let rnd = Rnd::new(&[7u8; 32]).unwrap();
    for bad in [&b""[..], &[VERSION; 28][..], &[0x02; 40][..]] {
        let offsets = [0, bad.len() as i64];
        let column = BinaryColumn::new(&offsets, bad, None).unwrap();
        let err = rnd.decrypt_column(&column, b"").unwrap_err();
        assert!(
            matches!(err, KernelError::Malformed { row: 0, .. }),
            "{err}"
        );
    }
}

#[test]
fn rejects_bad_keys_and_nonces() {
    assert!(matches!(
        Rnd::new(&[0u8; 16]),
        Err(KernelError::KeyLength {
            expected: 32,
            got: 16
        })
    ));
    let rnd = Rnd::new(&[0u8; 32]).unwrap();
    assert!(rnd
        .encrypt_with_nonce_for_tests(&[0u8; 8], b"", b"")
        .is_err());
}
