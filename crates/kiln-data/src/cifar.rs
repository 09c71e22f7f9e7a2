//! The CIFAR-10 binary format: records of 1 label byte then 3,072 pixel bytes (the red, green
//! and blue 32x32 planes, row-major).

use crate::DataError;

/// Bytes in one CIFAR-10 record.
pub const RECORD: usize = 1 + 3 * 32 * 32;

/// Split one batch file into pixels (`n * 3072`, planar RGB) and labels.
pub fn parse(bytes: &[u8], file: &str) -> Result<(Vec<u8>, Vec<u8>), DataError> {
    if bytes.is_empty() || !bytes.len().is_multiple_of(RECORD) {
        return Err(DataError::Corrupt {
            file: file.to_string(),
            why: format!(
                "{} bytes is not a whole number of {RECORD}-byte CIFAR-10 records \
                 (truncated or not a CIFAR-10 binary batch)",
                bytes.len()
            ),
        });
    }
    let n = bytes.len() / RECORD;
    let mut pixels = Vec::with_capacity(n * (RECORD - 1));
    let mut labels = Vec::with_capacity(n);
    for (i, record) in bytes.chunks_exact(RECORD).enumerate() {
        if record[0] >= 10 {
            return Err(DataError::Corrupt {
                file: file.to_string(),
                why: format!(
                    "record {i} has label {}, CIFAR-10 has 10 classes",
                    record[0]
                ),
            });
        }
        labels.push(record[0]);
        pixels.extend_from_slice(&record[1..]);
    }
    Ok((pixels, labels))
}

/// Encode records in the official layout (for tests and fixtures).
pub fn encode(pixels: &[u8], labels: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(labels.len() * RECORD);
    for (label, px) in labels.iter().zip(pixels.chunks_exact(RECORD - 1)) {
        out.push(*label);
        out.extend_from_slice(px);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_plane_order() {
        let mut px = vec![0u8; 2 * 3072];
        px[0] = 7; // red plane, first pixel of image 0
        px[1024] = 8; // green plane
        px[3072 + 2048] = 9; // blue plane of image 1
        let bytes = encode(&px, &[3, 9]);
        let (pixels, labels) = parse(&bytes, "b").unwrap();
        assert_eq!(labels, vec![3, 9]);
        assert_eq!(pixels, px);
    }

    #[test]
    fn partial_record_and_bad_label() {
        let bytes = encode(&[0u8; 3072], &[1]);
        let err = parse(&bytes[..100], "data_batch_1.bin")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("data_batch_1.bin") && err.contains("whole number"),
            "{err}"
        );
        let mut bytes = bytes;
        bytes[0] = 10;
        assert!(
            parse(&bytes, "x")
                .unwrap_err()
                .to_string()
                .contains("label 10")
        );
    }
}
