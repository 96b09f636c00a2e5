use super::*;
use crate::binary::{layout, non_empty_rows, BinaryColumn};

const KEY: [u8; 32] = [3u8; 32];

fn encrypt(texts: &[Option<&str>]) -> BinaryOutput {
    let values: Vec<Option<&[u8]>> = texts.iter().map(|t| t.map(str::as_bytes)).collect();
    let (offsets, data, validity) = layout(&values);
    let column = BinaryColumn::new(&offsets, &data, Some(&validity)).unwrap();
    SearchKey::new(&KEY)
        .unwrap()
        .encrypt_column(&column)
        .unwrap()
}

fn matches(stored: &BinaryOutput, word: &str) -> Vec<bool> {
    let offsets: Vec<i64> = stored.offsets.iter().map(|&o| o.into()).collect();
    let validity = non_empty_rows(&offsets);
    let column = BinaryColumn::new(&offsets, &stored.data, Some(&validity)).unwrap();
    let token = SearchKey::new(&KEY).unwrap().token(word).unwrap();
    let bits = match_column(&column, &token).unwrap();
    (0..column.len())
        .map(|row| bits[row / 8] >> (row % 8) & 1 == 1)
        .collect()
}

#[test]
fn tokenisation_lowercases_runs_of_letters_and_digits() {
    assert_eq!(
        tokenize("Hello, World! x2-y_z"),
        ["hello", "world", "x2", "y", "z"]
    );
    assert_eq!(
        tokenize("Straße ÜBER 東京 İstanbul"),
        ["straße", "über", "東京", "istanbul"]
    );
    assert!(tokenize("  ...  ").is_empty());
    assert!(tokenize("").is_empty());
}

#[test]
fn rows_store_distinct_words_sorted() {
    let stored = encrypt(&[Some("the cat and THE dog"), Some(""), None]);
    assert_eq!(stored.offsets, vec![0, 1 + 4 * 16, 66, 66]);
    assert_eq!(stored.data[0], VERSION);
    let words: Vec<&[u8]> = stored.data[1..65].chunks(16).collect();
    assert!(words.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_token_matches_rows_holding_its_word_in_any_case() {
    let stored = encrypt(&[Some("The Cat sat."), Some("a dog"), Some(""), None]);
    assert_eq!(matches(&stored, "cat"), [true, false, false, false]);
    assert_eq!(matches(&stored, "CAT"), [true, false, false, false]);
    assert_eq!(matches(&stored, "dog"), [false, true, false, false]);
    assert_eq!(matches(&stored, "ca"), [false; 4]);
}

#[test]
fn equal_texts_encrypt_differently() {
    let stored = encrypt(&[Some("same words"), Some("same words")]);
    assert_ne!(stored.data[..33], stored.data[33..]);
}

#[test]
fn tokens_are_for_single_words() {
    let key = SearchKey::new(&KEY).unwrap();
    for bad in ["", "two words", "dot.", " pad"] {
        assert!(
            matches!(key.token(bad), Err(KernelError::Parameter(_))),
            "{bad:?}"
        );
    }
    assert!(SearchKey::new(&[0u8; 16]).is_err());
}

#[test]
fn malformed_rows_and_tokens_are_refused() {
    let token = SearchKey::new(&KEY).unwrap().token("w").unwrap();
    for bad in [&b""[..], &[VERSION; 16][..], &[2u8; 17][..]] {
        let offsets = [0, bad.len() as i64];
        let column = BinaryColumn::new(&offsets, bad, None).unwrap();
        let err = match_column(&column, &token).unwrap_err();
        assert!(
            matches!(err, KernelError::Malformed { row: 0, .. }),
            "{err}"
        );
    }
    let empty = BinaryColumn::new(&[0], &[], None).unwrap();
    assert!(match_column(&empty, &token[..32]).is_err());
}

#[test]
fn invalid_utf8_is_outside_the_domain() {
    let (offsets, data, _) = layout(&[Some(&[0xff, 0xfe])]);
    let column = BinaryColumn::new(&offsets, &data, None).unwrap();
    let err = SearchKey::new(&KEY)
        .unwrap()
        .encrypt_column(&column)
        .unwrap_err();
    assert!(matches!(err, KernelError::Domain { row: 0, .. }));
}
