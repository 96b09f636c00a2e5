//! Batches of the engine's columns into `DataRow` messages, a batch at a time.

use bytes::{BufMut, BytesMut};
use pgwire::messages::data::DataRow;

use crate::engine::{Batch, Oid, WireError};
use crate::values::{hex_bytea, text_to_binary};

/// How one result column goes on the wire.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    pub oid: Oid,
    pub binary: bool,
}

/// The rows of `batch`, each field in its column's format.
pub fn encode_batch(batch: &Batch, layout: &[Layout]) -> Result<Vec<DataRow>, WireError> {
    if batch.columns.len() != layout.len() {
        return Err(WireError::internal(format!(
            "a batch has {} columns, its description {}",
            batch.columns.len(),
            layout.len()
        )));
    }
    let mut rows = Vec::with_capacity(batch.rows);
    let mut scratch = Vec::new();
    for row in 0..batch.rows {
        let mut buf = BytesMut::with_capacity(16 * layout.len());
        for (column, how) in batch.columns.iter().zip(layout) {
            let Some(value) = column.value(row) else {
                buf.put_i32(-1);
                continue;
            };
            scratch.clear();
            let bytes: &[u8] = match (column.raw_bytes, how.binary) {
                (true, true) | (false, false) => value,
                (true, false) => {
                    scratch.extend_from_slice(hex_bytea(value).as_bytes());
                    &scratch
                }
                (false, true) => {
                    text_to_binary(how.oid, value, &mut scratch)?;
                    &scratch
                }
            };
            buf.put_i32(bytes.len() as i32);
            buf.put_slice(bytes);
        }
        rows.push(DataRow::new(buf, layout.len() as i16));
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Column;
    use crate::values::{BYTEA, INT4, TEXT};

    #[test]
    fn texts_nulls_and_binary_fields() {
        let ints = Column {
            raw_bytes: false,
            offset: 1,
            offsets: vec![0, 1, 3, 4],
            data: b"712x".to_vec(),
            validity: Some(vec![0b011]),
        };
        let blobs = Column {
            raw_bytes: true,
            offset: 0,
            offsets: vec![0, 1, 2],
            data: vec![0xab, 0x01],
            validity: None,
        };
        let batch = Batch {
            rows: 2,
            columns: vec![ints, blobs],
        };
        let layout = [
            Layout {
                oid: INT4,
                binary: true,
            },
            Layout {
                oid: BYTEA,
                binary: false,
            },
        ];
        let rows = encode_batch(&batch, &layout).unwrap();
        assert_eq!(&rows[0].data[..], b"\0\0\0\x04\0\0\0\x0c\0\0\0\x04\\xab");
        assert_eq!(&rows[1].data[..8], b"\xff\xff\xff\xff\0\0\0\x04");
        let text = [Layout {
            oid: TEXT,
            binary: false,
        }; 2];
        assert!(encode_batch(
            &Batch {
                rows: 0,
                columns: vec![]
            },
            &text
        )
        .is_err());
    }
}
