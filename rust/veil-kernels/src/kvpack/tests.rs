use std::io::Write;

use aes_gcm::aead::Aead;
use aes_gcm::aead::Payload;

use super::*;

const KEY: [u8; 32] = [7; 32];
const NONCE: [u8; 12] = [9; 12];
const AAD: &[u8] = b"table/pack/0";

/// A version-1 record list, as Veil wrote before issue 14.
fn record_list(entries: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut out = vec![PACK_FORMAT_V1];
    out.extend((entries.len() as u32).to_be_bytes());
    for (key, _) in entries {
        out.extend((key.len() as u32).to_be_bytes());
    }
    for (_, value) in entries {
        out.extend((value.len() as u32).to_be_bytes());
    }
    for (key, _) in entries {
        out.extend_from_slice(key);
    }
    for (_, value) in entries {
        out.extend_from_slice(value);
    }
    out
}

fn compress(codec: u8, data: &[u8]) -> Vec<u8> {
    match codec {
        ZLIB => {
            let mut compressor =
                libdeflater::Compressor::new(libdeflater::CompressionLvl::default());
            let mut out = vec![0; compressor.zlib_compress_bound(data.len())];
            let n = compressor.zlib_compress(data, &mut out).unwrap();
            out.truncate(n);
            out
        }
        ZSTD => zstd::stream::encode_all(data, 3).unwrap(),
        _ => {
            let mut encoder = lz4_flex::frame::FrameEncoder::new(Vec::new());
            encoder.write_all(data).unwrap();
            encoder.finish().unwrap()
        }
    }
}

fn seal(codec: u8, plaintext: &[u8], padding: usize) -> Vec<u8> {
    seal_compressed(compress(codec, plaintext), padding)
}

fn seal_compressed(compressed: Vec<u8>, padding: usize) -> Vec<u8> {
    let mut body = (compressed.len() as u32).to_be_bytes().to_vec();
    body.extend(compressed);
    body.extend(vec![0; padding]);
    Aes256Gcm::new_from_slice(&KEY)
        .unwrap()
        .encrypt(
            Nonce::from_slice(&NONCE),
            Payload {
                msg: &body,
                aad: AAD,
            },
        )
        .unwrap()
}

fn sample() -> Vec<u8> {
    let big = vec![b'x'; 100_000];
    record_list(&[(b"\x01a", b"first"), (b"\x01b", b""), (b"\x01c", &big)])
}

#[test]
fn every_codec_round_trips() {
    for codec in [ZLIB, ZSTD, LZ4] {
        let sealed = seal(codec, &sample(), 33);
        let records = PackKey::new(&KEY)
            .unwrap()
            .open_pack(codec, &NONCE, &sealed, AAD)
            .unwrap();
        assert_eq!(records.keys.len(), 3);
        assert_eq!(records.value_of(b"\x01a"), Some(&b"first"[..]));
        assert_eq!(records.value_of(b"\x01b"), Some(&b""[..]));
        assert_eq!(records.value_of(b"\x01c").unwrap().len(), 100_000);
        assert_eq!(records.value_of(b"\x01d"), None);
    }
}

fn open_plain(plaintext: &[u8]) -> Result<RecordList, KernelError> {
    let sealed = seal(ZSTD, plaintext, 0);
    PackKey::new(&KEY)
        .unwrap()
        .open_pack(ZSTD, &NONCE, &sealed, AAD)
}

#[test]
fn version_two_front_codes_keys_and_reads_back() {
    let keys: Vec<Vec<u8>> = vec![
        vec![],
        b"\x01\x00\x00\x00\xfe".to_vec(),
        b"\x01\x00\x00\x00\xff".to_vec(),
        b"\x01\x00\x00\x01\x00".to_vec(), // a carry: the suffix starts one byte earlier
        b"\x01\x00\x00\x01".to_vec(),     // shorter than the previous key
        b"\x01\x00\x00\x01\x00\x07".to_vec(), // longer: no byte to difference against
        b"\x02zz".to_vec(),
    ];
    let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| vec![b'v'; i * 100]).collect();
    let key_refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let value_refs: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    for (plaintext, version) in [
        (
            serialize_records(&key_refs, &value_refs),
            PACK_FORMAT_VERSION,
        ),
        (
            serialize_records_as(&key_refs, &value_refs, None),
            PACK_FORMAT_V2,
        ),
    ] {
        assert_eq!(plaintext[0], version);
        let records = open_plain(&plaintext).unwrap();
        for (index, key) in keys.iter().enumerate() {
            assert_eq!(records.key(index), key.as_slice());
            assert_eq!(records.value_of(key), Some(values[index].as_slice()));
        }
    }
    // Consecutive integer keys cost three constant bytes each before compression.
    let ints: Vec<Vec<u8>> = (0u64..300)
        .map(|i| [&[1u8][..], &i.to_be_bytes()].concat())
        .collect();
    let int_refs: Vec<&[u8]> = ints.iter().map(|k| k.as_slice()).collect();
    let empty: Vec<&[u8]> = vec![&[]; 300];
    let compact = serialize_records(&int_refs, &empty);
    assert!(compact.len() < 300 * 5, "{}", compact.len());
    let records = open_plain(&compact).unwrap();
    assert_eq!(records.key(299), ints[299].as_slice());
}

#[test]
fn malformed_version_two_lists_are_refused() {
    for plaintext in [
        vec![2, 1, 1, 1, 0, b'k'], // shares a byte with no previous key
        vec![2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01], // overlong count
        vec![2, 1, 0, 2, 0, b'k'], // suffix runs past the end
        vec![2, 1, 0, 1, 0, b'k', b'x'], // trailing bytes
    ] {
        let err = open_plain(&plaintext).err().unwrap();
        assert!(matches!(err, KernelError::Malformed { .. }), "{err}");
    }
}

#[test]
fn empty_pack_opens() {
    let sealed = seal(ZLIB, &record_list(&[]), 0);
    let records = PackKey::new(&KEY)
        .unwrap()
        .open_pack(ZLIB, &NONCE, &sealed, AAD)
        .unwrap();
    assert!(records.keys.is_empty() && records.values.is_empty());
}

#[test]
fn tampering_wrong_key_and_moved_pack_fail_authentication() {
    let mut sealed = seal(ZLIB, &sample(), 0);
    let key = PackKey::new(&KEY).unwrap();
    let other = PackKey::new(&[8; 32]).unwrap();
    let auth = Err(KernelError::Authentication { row: 0 });
    assert_eq!(
        other.open_pack(ZLIB, &NONCE, &sealed, AAD).map(|_| ()),
        auth
    );
    assert_eq!(
        key.open_pack(ZLIB, &NONCE, &sealed, b"elsewhere")
            .map(|_| ()),
        auth
    );
    sealed[3] ^= 1;
    assert_eq!(key.open_pack(ZLIB, &NONCE, &sealed, AAD).map(|_| ()), auth);
}

#[test]
fn truncated_or_inconsistent_plaintexts_are_malformed() {
    let key = PackKey::new(&KEY).unwrap();
    let full = sample();
    for plaintext in [
        full[..full.len() - 1].to_vec(),
        vec![2, 0, 0, 0, 0],
        vec![1, 0, 0, 0, 9],
        [full.clone(), vec![0]].concat(),
    ] {
        let sealed = seal(ZLIB, &plaintext, 0);
        let err = key.open_pack(ZLIB, &NONCE, &sealed, AAD).err().unwrap();
        assert!(matches!(err, KernelError::Malformed { .. }), "{err}");
    }
}

#[test]
fn truncated_streams_and_unknown_codecs_are_malformed() {
    for codec in [ZLIB, ZSTD, LZ4] {
        let stream = compress(codec, &sample());
        let err = decompress(codec, &stream[..stream.len() / 2])
            .err()
            .unwrap();
        assert!(err.to_string().contains("does not decompress"), "{err}");
    }
    assert!(decompress(9, b"").is_err());
    assert!(PackKey::new(&KEY)
        .unwrap()
        .open_pack(ZLIB, &NONCE, &[0; 8], AAD)
        .is_err());
}

#[test]
fn dictionary_packs_need_their_dictionary() {
    let dictionary = b"Package: libexample Version: 1.0 Architecture: amd64 ".repeat(40);
    let plaintext = sample();
    let compressed = zstd::bulk::Compressor::with_dictionary(3, &dictionary)
        .unwrap()
        .compress(&plaintext)
        .unwrap();
    let sealed = seal_compressed(compressed, 0);
    let key = PackKey::new(&KEY).unwrap();
    let prepared = PackDictionary::new(&dictionary);
    let records = key
        .open_pack_with(ZSTD, &NONCE, &sealed, AAD, Some(&prepared))
        .unwrap();
    assert_eq!(records.value_of(b"\x01a"), Some(&b"first"[..]));
    let err = key
        .open_pack_with(ZLIB, &NONCE, &sealed, AAD, Some(&prepared))
        .err()
        .unwrap();
    assert!(err.to_string().contains("not zstd"), "{err}");
}

#[test]
fn version_three_ends_values_with_a_byte_none_holds() {
    let keys: Vec<&[u8]> = vec![b"\x01a", b"\x01b", b"\x01c", b"\x01d"];
    let cases: [(Vec<&[u8]>, Option<u8>); 3] = [
        (vec![b"line one", b"", b"line three", b"x"], Some(b'\n')),
        (vec![b"two\nlines", b"", b"\n", b"x"], Some(0)),
        (vec![b"\n\x00", b"\x01", b"", b"\x02\x03"], Some(4)),
    ];
    for (values, terminator) in cases {
        let plaintext = serialize_records(&keys, &values);
        assert_eq!(plaintext[0], PACK_FORMAT_VERSION);
        assert_eq!(plaintext[2], terminator.unwrap());
        let records = open_plain(&plaintext).unwrap();
        for (key, value) in keys.iter().zip(&values) {
            assert_eq!(records.value_of(key), Some(*value));
        }
    }
    // Values holding every byte value have no terminator: version 2.
    let all: Vec<u8> = (0..=255).collect();
    let values: Vec<&[u8]> = vec![&all, b"", b"a", b"b"];
    let plaintext = serialize_records(&keys, &values);
    assert_eq!(plaintext[0], PACK_FORMAT_V2);
    assert_eq!(
        open_plain(&plaintext).unwrap().value_of(b"\x01a"),
        Some(&all[..])
    );
    let empty = serialize_records(&[], &[]);
    assert_eq!(open_plain(&empty).unwrap().keys.len(), 0);
}

#[test]
fn malformed_version_three_lists_are_refused() {
    for plaintext in [
        vec![3, 1, b'\n', 0, 1, b'k', b'v'], // no terminator after the value
        vec![3, 1, b'\n', 0, 1, b'k', b'v', b'\n', b'x'], // trailing bytes
        vec![3, 1],                          // no terminator byte
        vec![3, 2, b'\n', 0, 1, 0, 1, b'k'], // suffixes run past the end
    ] {
        let err = open_plain(&plaintext).err().unwrap();
        assert!(matches!(err, KernelError::Malformed { .. }), "{err}");
    }
}
