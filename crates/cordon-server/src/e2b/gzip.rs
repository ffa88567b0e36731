//! gzip on envd's `/files`: uploads the SDK compresses (`Content-Encoding: gzip`, its
//! `gzip=True`) and downloads it asks compressed (`Accept-Encoding: gzip`).

use std::io::Read;

use axum::http::{header, HeaderMap};

use crate::error::{ApiError, ErrorKind};

/// Whether an upload is gzip (`Content-Encoding: gzip`); none or `identity` is plain, any other
/// encoding an error that names it.
pub(super) fn upload_is_gzip(h: &HeaderMap) -> Result<bool, ApiError> {
    let Some(v) = h.get(header::CONTENT_ENCODING) else {
        return Ok(false);
    };
    let v = v.to_str().unwrap_or("").trim().to_ascii_lowercase();
    match v.as_str() {
        "" | "identity" => Ok(false),
        "gzip" | "x-gzip" => Ok(true),
        other => Err(ApiError::new(
            ErrorKind::UnsupportedMedia,
            "unsupported_media_type",
            format!("Content-Encoding '{other}' is not accepted: send gzip or none"),
        )),
    }
}

/// Unpacks a gzip body, never to more than `max` bytes: a small body that would unpack to
/// more (a gzip bomb) is refused after `max + 1` bytes, so memory stays bounded.
pub(super) fn gunzip(data: &[u8], max: usize) -> Result<Vec<u8>, ApiError> {
    let mut out = Vec::new();
    flate2::read::MultiGzDecoder::new(data)
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| ApiError::bad_request(format!("gzip body: {e}")))?;
    if out.len() > max {
        return Err(ApiError::too_large(
            "the upload (unpacked from gzip)",
            max as u64,
        ));
    }
    Ok(out)
}

/// Whether the client takes a gzip answer (`Accept-Encoding: gzip`, not with `q=0`).
pub(super) fn accepts_gzip(h: &HeaderMap) -> bool {
    h.get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let q_zero = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !q_zero
        })
}

pub(super) fn gzip(data: &[u8]) -> Result<Vec<u8>, ApiError> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(data)
        .and_then(|_| enc.finish())
        .map_err(|e| ApiError::internal(format!("gzip: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gzip_bomb_stops_at_the_cap() {
        // 64 MiB of zeros pack into ~64 KiB.
        let bomb = gzip(&vec![0u8; 64 << 20]).expect("pack");
        assert!(bomb.len() < 1 << 20);
        let e = gunzip(&bomb, 1 << 20).err().map(|e| e.kind);
        assert_eq!(e, Some(ErrorKind::TooLarge));
        assert_eq!(
            gunzip(&gzip(b"hi").expect("pack"), 2).ok(),
            Some(b"hi".to_vec())
        );
        assert_eq!(
            gunzip(b"not gzip", 10).err().map(|e| e.kind),
            Some(ErrorKind::Invalid)
        );
    }

    #[test]
    fn accept_encoding_is_read() {
        let mut h = HeaderMap::new();
        assert!(!accepts_gzip(&h));
        h.insert(
            header::ACCEPT_ENCODING,
            "deflate, gzip;q=0.5".parse().expect("hv"),
        );
        assert!(accepts_gzip(&h));
        h.insert(header::ACCEPT_ENCODING, "gzip;q=0".parse().expect("hv"));
        assert!(!accepts_gzip(&h));
    }
}
