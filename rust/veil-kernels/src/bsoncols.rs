//! Columns of a fetched grouped sum, read straight from the server's raw BSON.
//!
//! The fetched path of a grouped ASHE `$sum` (`veil.documents.fetchsums`) needs,
//! per document, the group key and each summed field's flat form: the low half
//! at the field's name, the high half at name + `h`, the value's id at name +
//! `i` and the ids of its blind `$inc` at name + `j`. Decoding 100,000 documents
//! into Python dicts cost pymongo about a fifth of the whole query; this walks
//! the top level of each document once and keeps only those fields.
//!
//! Anything outside that common shape (a key that is not null, an integer, a
//! string or generic binary; a nested or list-id form of an earlier version; a
//! value of another type) gives `None`, and the caller decodes the documents
//! the general way. Malformed BSON gives `None` too: the caller's decoder then
//! reports it.

use std::collections::HashMap;

/// One summed field's columns, one entry per document (0 and `false` where absent).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AsheColumns {
    pub low: Vec<i64>,
    pub high: Vec<i64>,
    /// Whether the document holds a value (an id at `i` or `j`).
    pub valued: Vec<bool>,
    pub first: Vec<i64>,
    pub has_first: Vec<bool>,
    /// The ids of blind `$inc`, as (document index, id) pairs.
    pub inc_docs: Vec<i64>,
    pub inc_ids: Vec<i64>,
}

/// Every document's group number, each group's token and each field's columns.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Per document, its group: an index into `keys`.
    pub codes: Vec<i64>,
    /// Per group, in the order first met: `z` (null or missing), `n` + the integer's
    /// 8 big-endian bytes (int32 and int64 group as one, as MongoDB groups them),
    /// `b` + generic binary, `s` + a string's UTF-8: equal tokens are equal keys.
    pub keys: Vec<Vec<u8>>,
    pub fields: Vec<AsheColumns>,
}

/// One top-level element's value.
enum Value<'a> {
    Int(i64),
    Null,
    Binary(u8, &'a [u8]),
    Str(&'a [u8]),
    Array(&'a [u8]),
    Other,
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let out = self.data.get(self.at..end)?;
        self.at = end;
        Some(out)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn length(&mut self) -> Option<usize> {
        usize::try_from(self.i32()?).ok()
    }

    fn cstring(&mut self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.at..)?;
        let end = rest.iter().position(|&b| b == 0)?;
        self.at += end + 1;
        Some(&rest[..end])
    }

    /// The value of an element of type `kind`, the reader moved past it.
    fn value(&mut self, kind: u8) -> Option<Value<'a>> {
        Some(match kind {
            0x10 => Value::Int(i64::from(self.i32()?)),
            0x12 => Value::Int(i64::from_le_bytes(self.take(8)?.try_into().ok()?)),
            0x0A => Value::Null,
            0x05 => {
                let n = self.length()?;
                let subtype = self.byte()?;
                Value::Binary(subtype, self.take(n)?)
            }
            0x02 => {
                let n = self.length()?;
                let text = self.take(n)?;
                Value::Str(text.strip_suffix(&[0])?)
            }
            0x04 | 0x03 => {
                let start = self.at;
                let n = self.length()?;
                self.at = start;
                let whole = self.take(n)?;
                if kind == 0x04 {
                    Value::Array(whole)
                } else {
                    Value::Other
                }
            }
            0x01 | 0x09 | 0x11 => {
                self.take(8)?;
                Value::Other
            }
            0x07 => {
                self.take(12)?;
                Value::Other
            }
            0x08 => {
                self.take(1)?;
                Value::Other
            }
            0x13 => {
                self.take(16)?;
                Value::Other
            }
            0x06 | 0xFF | 0x7F => Value::Other,
            _ => return None, // a type this reader does not skip: the caller decodes
        })
    }
}

/// The top-level `(name, value)` pairs of one document, the reader moved past it.
fn elements<'a>(reader: &mut Reader<'a>) -> Option<Vec<(&'a [u8], Value<'a>)>> {
    let start = reader.at;
    let length = reader.length()?;
    let end = start.checked_add(length)?;
    let mut out = Vec::new();
    loop {
        let kind = reader.byte()?;
        if kind == 0 {
            break;
        }
        let name = reader.cstring()?;
        out.push((name, reader.value(kind)?));
    }
    (reader.at == end).then_some(out)
}

fn key_token(value: Option<&Value<'_>>) -> Option<Vec<u8>> {
    Some(match value {
        None | Some(Value::Null) => vec![b'z'],
        Some(Value::Int(v)) => [&[b'n'][..], &v.to_be_bytes()].concat(),
        Some(Value::Binary(0, data)) => [&[b'b'][..], data].concat(),
        Some(Value::Str(text)) => [&[b's'][..], text].concat(),
        Some(_) => return None,
    })
}

fn int_array(array: &[u8]) -> Option<Vec<i64>> {
    let mut reader = Reader { data: array, at: 0 };
    elements(&mut reader)?
        .into_iter()
        .map(|(_, value)| match value {
            Value::Int(v) => Some(v),
            _ => None,
        })
        .collect()
}

/// Read `key` (None: no grouping) and the flat ASHE forms of `names` from every
/// document of `batches` (each a concatenation of BSON documents); None when a
/// document is not of the common shape.
pub fn fetched_columns(batches: &[&[u8]], key: Option<&[u8]>, names: &[&[u8]]) -> Option<Fetched> {
    let mut out = Fetched {
        fields: names.iter().map(|_| AsheColumns::default()).collect(),
        ..Fetched::default()
    };
    let mut numbers: HashMap<Vec<u8>, i64> = HashMap::new();
    let suffixed = |name: &[u8], part: u8| [name, &[part]].concat();
    let parts: Vec<[Vec<u8>; 3]> = names
        .iter()
        .map(|n| [suffixed(n, b'h'), suffixed(n, b'i'), suffixed(n, b'j')])
        .collect();
    for batch in batches {
        let mut reader = Reader { data: batch, at: 0 };
        while reader.at < batch.len() {
            let document = elements(&mut reader)?;
            let find = |wanted: &[u8]| document.iter().find(|(n, _)| *n == wanted).map(|(_, v)| v);
            let token = match key {
                Some(k) => key_token(find(k))?,
                None => vec![b'z'],
            };
            let next = numbers.len() as i64;
            let code = *numbers.entry(token).or_insert_with_key(|token| {
                out.keys.push(token.clone());
                next
            });
            out.codes.push(code);
            let row = out.codes.len() as i64 - 1;
            for ((name, [high, first, extra]), columns) in
                names.iter().zip(&parts).zip(&mut out.fields)
            {
                let first = match find(first) {
                    None | Some(Value::Null) => None,
                    Some(Value::Int(v)) => Some(*v),
                    Some(_) => return None, // a list of ids: a form of an earlier version
                };
                let extras = match find(extra) {
                    None | Some(Value::Null) => Vec::new(),
                    Some(Value::Array(array)) => int_array(array)?,
                    Some(_) => return None,
                };
                let valued =
                    first.is_some() || find(extra).is_some_and(|v| !matches!(v, Value::Null));
                let (low, high) = match (find(name), find(high)) {
                    (Some(Value::Int(l)), Some(Value::Int(h))) => (*l, *h),
                    (Some(Value::Array(_) | Value::Other), _) => return None, // nested form
                    _ if valued => return None, // a value's halves must be there
                    _ => (0, 0),
                };
                columns.low.push(low);
                columns.high.push(high);
                columns.valued.push(valued);
                columns.first.push(first.unwrap_or(0));
                columns.has_first.push(first.is_some());
                for id in extras {
                    columns.inc_docs.push(row);
                    columns.inc_ids.push(id);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn element(kind: u8, name: &str, value: &[u8]) -> Vec<u8> {
        [&[kind][..], name.as_bytes(), &[0], value].concat()
    }

    fn document(elements: &[Vec<u8>]) -> Vec<u8> {
        let body: Vec<u8> = elements.concat();
        let length = (body.len() + 5) as i32;
        [&length.to_le_bytes()[..], &body, &[0]].concat()
    }

    fn int64(v: i64) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    #[test]
    fn reads_keys_halves_and_ids() {
        let ids = document(&[
            element(0x12, "0", &int64(7)),
            element(0x10, "1", &8i32.to_le_bytes()),
        ]);
        let a = document(&[
            element(0x10, "_id", &1i32.to_le_bytes()),
            element(0x05, "k", &[&3i32.to_le_bytes()[..], &[0], b"abc"].concat()),
            element(0x12, "f", &int64(5)),
            element(0x12, "fh", &int64(6)),
            element(0x12, "fi", &int64(9)),
            element(0x04, "fj", &ids),
        ]);
        let b = document(&[element(0x10, "k", &4i32.to_le_bytes())]);
        let c = document(&[
            element(0x12, "k", &int64(4)),
            element(0x01, "x", &1.5f64.to_le_bytes()),
        ]);
        let batch = [a, b, c].concat();
        let got = fetched_columns(&[&batch], Some(b"k"), &[b"f"]).unwrap();
        assert_eq!(got.codes, vec![0, 1, 1]); // int32 and int64 4 group as one
        assert_eq!(
            got.keys,
            vec![
                b"babc".to_vec(),
                [&[b'n'][..], &4i64.to_be_bytes()].concat()
            ]
        );
        let f = &got.fields[0];
        assert_eq!(
            (f.low.clone(), f.high.clone()),
            (vec![5, 0, 0], vec![6, 0, 0])
        );
        assert_eq!(f.valued, vec![true, false, false]);
        assert_eq!(
            (f.first[0], f.has_first.clone()),
            (9, vec![true, false, false])
        );
        assert_eq!(
            (f.inc_docs.clone(), f.inc_ids.clone()),
            (vec![0, 0], vec![7, 8])
        );
    }

    #[test]
    fn other_shapes_and_damage_give_none() {
        let nested = document(&[element(
            0x03,
            "f",
            &document(&[element(0x12, "l", &int64(1))]),
        )]);
        assert!(fetched_columns(&[&nested], None, &[b"f"]).is_none());
        let float_key = document(&[element(0x01, "k", &1.0f64.to_le_bytes())]);
        assert!(fetched_columns(&[&float_key], Some(b"k"), &[b"f"]).is_none());
        let no_halves = document(&[element(0x12, "fi", &int64(1))]);
        assert!(fetched_columns(&[&no_halves], None, &[b"f"]).is_none());
        let truncated = &document(&[element(0x12, "f", &int64(1))])[..9];
        assert!(fetched_columns(&[truncated], None, &[b"f"]).is_none());
    }
}
