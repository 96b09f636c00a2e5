use super::*;

const KEY: [u8; 32] = [3; 32];
const NONCE: [u8; 12] = [5; 12];
const AAD: &[u8] = b"table/pack/0/header";

fn entries(count: usize) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let keys = (0..count as u64)
        .map(|i| i.to_be_bytes().to_vec())
        .collect();
    let values = (0..count)
        .map(|i| format!("{{\"id\":{i},\"name\":\"pkg{}\"}}", i % 7).into_bytes())
        .collect();
    (keys, values)
}

/// A pack of these rows (their keys as positions), sealed with no previous pack.
fn seal_new(
    k: &[&[u8]],
    v: &[&[u8]],
    block_rows: usize,
    dictionary: Option<&PackDictionary>,
    level: Level,
) -> Vec<u8> {
    seal_blocked(
        &KEY, &NONCE, AAD, k, v, k, block_rows, dictionary, level, None,
    )
    .unwrap()
}

fn sealed(count: usize, block_rows: usize) -> (Vec<u8>, Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (keys, values) = entries(count);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let body = seal_new(&k, &v, block_rows, None, Level::Fast);
    (body, keys, values)
}

#[test]
fn blocked_pack_round_trips() {
    let (body, keys, values) = sealed(100, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert_eq!(pack.index.spans.len(), 13);
    let records = pack.records(None).unwrap();
    assert_eq!(records.keys.len(), 100);
    for (index, (key, value)) in keys.iter().zip(&values).enumerate() {
        assert_eq!(records.key(index), key.as_slice());
        let block = pack.block_of(key).unwrap();
        assert_eq!(block, index / 8);
        let found = pack.block(block, None).unwrap();
        assert_eq!(found.value_of(key), Some(value.as_slice()));
    }
}

#[test]
fn blocks_read_into_one_list_match_blocks_read_one_by_one() {
    let (body, _, _) = sealed(100, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    let one = pack.records_of(2..9, None).unwrap();
    let mut index = 0;
    for number in 2..9 {
        let alone = pack.block(number, None).unwrap();
        for within in 0..alone.keys.len() {
            assert_eq!(one.key(index), alone.key(within));
            assert_eq!(
                &one.data[one.values[index].clone()],
                &alone.data[alone.values[within].clone()]
            );
            index += 1;
        }
    }
    assert_eq!(index, one.keys.len());
    assert!(pack.records_of(3..3, None).unwrap().keys.is_empty());
    assert_eq!(
        pack.records_of(0..pack.block_count(), None)
            .unwrap()
            .keys
            .len(),
        100
    );
}

#[test]
fn blocks_between_cover_exactly_the_blocks_a_range_meets() {
    // 100 keys 0..100 in blocks of 8: block b holds keys 8b..8b+8.
    let (body, keys, _) = sealed(100, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert_eq!(pack.block_count(), 13);
    let key = |i: usize| keys[i].as_slice();
    assert_eq!(pack.blocks_between(key(0), key(99)), 0..13);
    assert_eq!(pack.blocks_between(key(9), key(15)), 1..2);
    assert_eq!(pack.blocks_between(key(7), key(8)), 0..2);
    assert_eq!(pack.blocks_between(key(96), &[0xff; 9]), 12..13);
    // Below the first key: from block 0; a range wholly below: nothing.
    assert_eq!(pack.blocks_between(&[], key(3)), 0..1);
    assert_eq!(pack.blocks_between(&[], &[]), 0..0);
    assert_eq!(pack.blocks_between(key(20), key(10)), 0..0);
    // Every key of a range is in the blocks chosen for it.
    for (low, high) in [(0, 5), (3, 41), (17, 17), (50, 99)] {
        let blocks = pack.blocks_between(key(low), key(high));
        let held: Vec<Vec<u8>> = blocks
            .flat_map(|b| {
                let r = pack.block(b, None).unwrap();
                (0..r.keys.len())
                    .map(|i| r.key(i).to_vec())
                    .collect::<Vec<_>>()
            })
            .collect();
        for i in low..=high {
            assert!(held.contains(&keys[i]), "key {i} of {low}..={high}");
        }
    }
}

#[test]
fn a_key_below_the_first_block_has_no_block() {
    let (body, _, _) = sealed(20, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert_eq!(pack.block_of(&[]), None);
}

#[test]
fn an_empty_pack_has_no_blocks() {
    let body = seal_blocked(&KEY, &NONCE, AAD, &[], &[], &[], 8, None, Level::Fast, None).unwrap();
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert_eq!(pack.records(None).unwrap().keys.len(), 0);
    assert_eq!(pack.block_of(b"k"), None);
}

#[test]
fn another_nonce_aad_or_key_fails_authentication() {
    let (body, _, _) = sealed(30, 8);
    let other_key = [4u8; 32];
    for (key, nonce, aad) in [
        (&KEY, [6u8; 12], AAD),
        (&KEY, NONCE, &b"table/pack/1/header"[..]),
        (&other_key, NONCE, AAD),
    ] {
        assert!(matches!(
            BlockedPack::open(key, &nonce, aad, &body),
            Err(KernelError::Authentication { .. })
        ));
    }
}

#[test]
fn a_damaged_block_fails_only_its_reads() {
    let (mut body, keys, _) = sealed(30, 8);
    let last = body.len() - 1;
    body[last] ^= 1;
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert!(pack.block(0, None).is_ok());
    let damaged = pack.block_of(&keys[29]).unwrap();
    assert!(matches!(
        pack.block(damaged, None),
        Err(KernelError::Authentication { .. })
    ));
    assert!(pack.records(None).is_err());
}

#[test]
fn swapped_blocks_fail_authentication() {
    let (body, _, _) = sealed(16, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    let (first, second) = (pack.index.spans[0].clone(), pack.index.spans[1].clone());
    if first.len() == second.len() {
        let mut swapped = body.clone();
        swapped[first.clone()].copy_from_slice(&body[second.clone()]);
        swapped[second].copy_from_slice(&body[first]);
        let pack = BlockedPack::open(&KEY, &NONCE, AAD, &swapped).unwrap();
        assert!(pack.block(0, None).is_err());
    }
}

#[test]
fn truncated_or_extended_packs_are_malformed() {
    let (body, _, _) = sealed(30, 8);
    for broken in [&body[..body.len() - 3], &body[..2]] {
        assert!(matches!(
            BlockedPack::open(&KEY, &NONCE, AAD, broken),
            Err(KernelError::Malformed { .. })
        ));
    }
    let mut longer = body.clone();
    longer.push(0);
    assert!(BlockedPack::open(&KEY, &NONCE, AAD, &longer).is_err());
}

#[test]
fn blocks_compress_with_a_dictionary() {
    let (keys, values) = entries(400);
    let sample: Vec<u8> = values.concat();
    let dictionary = PackDictionary::new(&sample[..4096]);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let with = seal_new(&k, &v, 4, Some(&dictionary), Level::Dense);
    let without = seal_new(&k, &v, 4, None, Level::Fast);
    assert!(with.len() < without.len());
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &with).unwrap();
    assert_eq!(pack.records(Some(&dictionary)).unwrap().keys.len(), 400);
}

#[test]
fn a_resealed_pack_keeps_the_compressed_form_of_unchanged_blocks() {
    let (keys, mut values) = entries(40);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let old_body = {
        let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
        seal_new(&k, &v, 8, None, Level::Dense)
    };
    let old = BlockedPack::open(&KEY, &NONCE, AAD, &old_body).unwrap();
    values[20] = b"changed".to_vec(); // block 2 of 5
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let new_nonce = [6u8; 12];
    let seal = |previous| {
        seal_blocked(
            &KEY,
            &new_nonce,
            AAD,
            &k,
            &v,
            &k,
            8,
            None,
            Level::Fast,
            previous,
        )
        .unwrap()
    };
    let body = seal(Some(&old));
    let new = BlockedPack::open(&KEY, &new_nonce, AAD, &body).unwrap();
    for number in 0..5 {
        let span = |pack: &BlockedPack| pack.index.spans[number].clone();
        let before = old
            .cipher
            .open(number + 1, &old.index.aad, &old.body[span(&old)])
            .unwrap();
        let after = new
            .cipher
            .open(number + 1, &new.index.aad, &new.body[span(&new)])
            .unwrap();
        assert_eq!(before == after, number != 2, "block {number}");
    }
    let records = new.records(None).unwrap();
    for (index, value) in values.iter().enumerate() {
        assert_eq!(
            &records.data[records.values[index].clone()],
            value.as_slice()
        );
    }
    // Without a previous pack every block is compressed again (here at another level).
    assert_ne!(seal(None).len(), body.len());
}

#[test]
fn a_point_lookup_finds_what_the_block_holds() {
    let (keys, values) = entries(100);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let dictionary = PackDictionary::new(&values.concat());
    for (rows, prepared) in [(8, None), (7, Some(&dictionary)), (100, None), (1, None)] {
        let body = seal_new(&k, &v, rows, prepared, Level::Fast);
        let find = |wanted: &[u8]| lookup(&KEY, &NONCE, AAD, &body, wanted, wanted, prepared);
        for (key, value) in keys.iter().zip(&values) {
            assert_eq!(find(key).unwrap().as_deref(), Some(value.as_slice()));
        }
        // Between two keys, past the last, before the first: absent.
        assert_eq!(find(&[0, 0, 0, 0, 0, 0, 0, 3, 1]).unwrap(), None);
        assert_eq!(find(&200u64.to_be_bytes()).unwrap(), None);
        assert_eq!(find(&[]).unwrap(), None);
    }
}

#[test]
fn a_point_lookup_refuses_tampering() {
    let (body, keys, _) = sealed(40, 8);
    let mut tampered = body.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    let find = |body: &[u8]| lookup(&KEY, &NONCE, AAD, body, &keys[39], &keys[39], None);
    assert!(matches!(
        find(&tampered),
        Err(KernelError::Authentication { .. })
    ));
    assert!(matches!(
        find(&body[..body.len() - 1]),
        Err(KernelError::Malformed { .. })
    ));
    let mut longer = body.clone();
    longer.push(0);
    assert!(matches!(find(&longer), Err(KernelError::Malformed { .. })));
}

#[test]
fn find_value_agrees_with_the_full_parse() {
    let (keys, values) = entries(50);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    for records in [
        serialize_records(&k, &v),
        super::super::serialize_records_as(&k, &v, None),
    ] {
        let parsed = parse_records(records.clone()).unwrap();
        for (index, key) in keys.iter().enumerate() {
            let span = find_value(&records, key).unwrap().unwrap();
            assert_eq!(&records[span], &parsed.data[parsed.values[index].clone()]);
        }
        assert_eq!(find_value(&records, b"absent").unwrap(), None);
    }
}

#[test]
fn find_value_agrees_on_keys_that_prefix_each_other() {
    // Keys of several lengths, some prefixes of others, and values of 0 to
    // 300 bytes (terminators counted across and inside 64-byte chunks).
    let keys: Vec<Vec<u8>> = [
        &b"a"[..],
        b"aa",
        b"aab",
        b"ab",
        b"abc",
        b"abd",
        b"b",
        b"ba",
        b"bab",
        b"c",
    ]
    .iter()
    .map(|k| k.to_vec())
    .collect();
    let values: Vec<Vec<u8>> = (0..keys.len())
        .map(|i| vec![b'x' + (i % 3) as u8; (i * 37) % 301])
        .collect();
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let records = serialize_records(&k, &v);
    for (index, key) in keys.iter().enumerate() {
        let span = find_value(&records, key).unwrap().unwrap();
        assert_eq!(&records[span], values[index].as_slice());
    }
    for absent in [
        &b""[..],
        b"aaa",
        b"abb",
        b"abcd",
        b"ac",
        b"bb",
        b"d",
        b"\x00",
    ] {
        assert_eq!(find_value(&records, absent).unwrap(), None, "{absent:?}");
    }
}

#[test]
fn find_value_reports_a_missing_terminator() {
    let (keys, values) = entries(80);
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let records = serialize_records(&k, &v);
    // Cut inside the values: the last keys' values lose their terminators.
    let cut = &records[..records.len() - 200];
    assert!(matches!(
        find_value(cut, &keys[79]),
        Err(KernelError::Malformed { .. })
    ));
    assert!(find_value(cut, &keys[0]).unwrap().is_some());
}

#[test]
fn segments_are_standard_aes_gcm() {
    // Packs sealed before ring (aes-gcm) and after must read alike: open
    // the index of a pack sealed here with aes-gcm under the derived key.
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::{Aes256Gcm, KeyInit as _};
    let (body, _, _) = sealed(30, 8);
    let index_length = u32::from_be_bytes(body[..4].try_into().unwrap()) as usize;
    let sealed_index = &body[4..4 + index_length];
    let (ciphertext, tag) = sealed_index.split_at(index_length - TAG_LEN);
    let key = pack_key(&KEY, &NONCE).unwrap();
    // K_pack as the layout defines it, one block at a time.
    let derive = Aes256::new_from_slice(&KEY).unwrap();
    for (i, part) in key.chunks(8).enumerate() {
        let mut block = [0u8; 16];
        block[..4].copy_from_slice(&(i as u32).to_le_bytes());
        block[4..].copy_from_slice(&NONCE);
        derive.encrypt_block(GenericArray::from_mut_slice(&mut block));
        assert_eq!(part, &block[..8]);
    }
    let cipher = Aes256Gcm::new_from_slice(&key).unwrap();
    let mut nonce = [0u8; NONCE_LEN];
    nonce[NONCE_LEN - 8..].copy_from_slice(&0u64.to_be_bytes());
    let mut index = ciphertext.to_vec();
    cipher
        .decrypt_in_place_detached(
            aes_gcm::Nonce::from_slice(&nonce),
            &full_aad(AAD, index_length),
            &mut index,
            aes_gcm::Tag::from_slice(tag),
        )
        .unwrap();
    assert_eq!(read_varint(&index, &mut 0).unwrap(), 4); // 30 rows in blocks of 8
}

#[test]
fn a_large_block_does_not_stay_allocated() {
    let keys: Vec<Vec<u8>> = (0..100u64).map(|i| i.to_be_bytes().to_vec()).collect();
    let values: Vec<Vec<u8>> = (0..100u8).map(|i| vec![b'a' + i % 26; 4096]).collect();
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let v: Vec<&[u8]> = values.iter().map(|v| v.as_slice()).collect();
    let body = seal_new(&k, &v, 100, None, Level::Fast);
    let found = lookup(&KEY, &NONCE, AAD, &body, &keys[7], &keys[7], None).unwrap();
    assert_eq!(found.as_deref(), Some(values[7].as_slice()));
    SCRATCH.with(|scratch| {
        let (segment, records) = &*scratch.borrow();
        assert!(segment.capacity() <= SCRATCH_KEEP && records.capacity() <= SCRATCH_KEEP);
    });
}

#[test]
fn a_short_last_block_joins_the_one_before() {
    assert_eq!(block_bounds(0, 8), Vec::<Range<usize>>::new());
    assert_eq!(block_bounds(3, 8), vec![0..3]); // one block, however short
    assert_eq!(block_bounds(16, 8), vec![0..8, 8..16]);
    assert_eq!(block_bounds(20, 8), vec![0..8, 8..16, 16..20]); // half a block stays
    assert_eq!(block_bounds(19, 8), vec![0..8, 8..19]);
    assert_eq!(block_bounds(2637, 200).len(), 13);
    assert_eq!(block_bounds(2637, 200)[12], 2400..2637);
    assert_eq!(block_bounds(5, 0), vec![0..1, 1..2, 2..3, 3..4, 4..5]);
    // Sealed and read back: the merged block holds its 11 rows.
    let (body, keys, values) = sealed(19, 8);
    let pack = BlockedPack::open(&KEY, &NONCE, AAD, &body).unwrap();
    assert_eq!(pack.block_count(), 2);
    assert_eq!(pack.block_of(&keys[18]), Some(1));
    let block = pack.block(1, None).unwrap();
    assert_eq!(block.keys.len(), 11);
    assert_eq!(block.value_of(&keys[18]), Some(values[18].as_slice()));
    assert_eq!(pack.blocks_between(&keys[17], &keys[18]), 1..2);
}
