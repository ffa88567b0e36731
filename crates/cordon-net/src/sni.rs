//! The server name (SNI) of a TLS ClientHello.
//!
//! Hand-written rather than `tls-parser`: the proxy needs one field of one message, and this
//! parser is ~100 lines of bounds-checked slice reads with no allocation besides the name,
//! where the alternative pulls in a nom-based grammar of all of TLS. Only the first handshake
//! message is looked at; it may span several records (RFC 8446 §5.1 allows fragmenting it).

/// What the first bytes of a tunnel say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Need more bytes.
    Incomplete,
    /// Not a TLS handshake: the tunnel carries something else.
    NotTls,
    /// A complete ClientHello and the host name it carries, if any.
    Complete(Option<String>),
    /// Starts like TLS but is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Largest ClientHello accepted (real ones are a few KiB, with post-quantum key shares ~2 KiB).
pub const MAX_HELLO: usize = 64 * 1024;
const RECORD_HANDSHAKE: u8 = 22;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const NAME_TYPE_HOST: u8 = 0;
/// Largest record fragment TLS allows (2^14) plus the expansion older versions permit.
const MAX_FRAGMENT: usize = (1 << 14) + 2048;

/// Inspect what the client sent first.
pub(crate) fn parse(buf: &[u8]) -> Hello {
    match buf.first() {
        None => return Hello::Incomplete,
        Some(&RECORD_HANDSHAKE) => {}
        Some(_) => return Hello::NotTls,
    }
    // Reassemble the handshake bytes from consecutive records.
    let mut handshake = Vec::new();
    let mut rest = buf;
    loop {
        let Some(header) = rest.get(..5) else {
            return Hello::Incomplete;
        };
        if header[0] != RECORD_HANDSHAKE {
            return Hello::Malformed("non-handshake record inside the ClientHello");
        }
        if header[1] != 3 {
            return Hello::Malformed("unknown record version");
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_FRAGMENT {
            return Hello::Malformed("bad record length");
        }
        let Some(fragment) = rest.get(5..5 + len) else {
            return Hello::Incomplete;
        };
        handshake.extend_from_slice(fragment);
        rest = &rest[5 + len..];
        if handshake.len() >= 4 {
            if handshake[0] != HANDSHAKE_CLIENT_HELLO {
                return Hello::Malformed("first handshake message is not a ClientHello");
            }
            let body_len = usize::from(handshake[1]) << 16
                | usize::from(handshake[2]) << 8
                | usize::from(handshake[3]);
            if body_len + 4 > MAX_HELLO {
                return Hello::Malformed("ClientHello too large");
            }
            if handshake.len() >= 4 + body_len {
                return match client_hello_sni(&handshake[4..4 + body_len]) {
                    Ok(name) => Hello::Complete(name),
                    Err(why) => Hello::Malformed(why),
                };
            }
        }
        if handshake.len() > MAX_HELLO {
            return Hello::Malformed("ClientHello too large");
        }
    }
}

/// A cursor over a byte slice whose reads fail instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.buf.len() {
            return Err("truncated ClientHello");
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

fn client_hello_sni(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader { buf: body };
    let _legacy_version = r.take(2)?;
    let _random = r.take(32)?;
    let session_id = r.vec8()?;
    if session_id.len() > 32 {
        return Err("bad session id");
    }
    let _cipher_suites = r.vec16()?;
    let _compression = r.vec8()?;
    if r.buf.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut exts = Reader { buf: r.vec16()? };
    if !r.buf.is_empty() {
        return Err("trailing bytes after extensions");
    }
    let mut name = None;
    let mut seen_sni = false;
    while !exts.buf.is_empty() {
        let ext_type = exts.u16()?;
        let data = exts.vec16()?;
        if ext_type != EXT_SERVER_NAME {
            continue;
        }
        if seen_sni {
            return Err("duplicate server_name extension");
        }
        seen_sni = true;
        let mut ext = Reader { buf: data };
        let mut list = Reader { buf: ext.vec16()? };
        if !ext.buf.is_empty() {
            return Err("trailing bytes in server_name");
        }
        while !list.buf.is_empty() {
            let name_type = list.u8()?;
            let value = list.vec16()?;
            if name_type != NAME_TYPE_HOST {
                continue;
            }
            if name.is_some() {
                return Err("several host names in server_name");
            }
            let text = std::str::from_utf8(value).map_err(|_| "server name is not text")?;
            if text.is_empty() {
                return Err("empty server name");
            }
            name = Some(text.to_string());
        }
    }
    Ok(name)
}

/// A minimal, well-formed ClientHello record carrying `sni` (for tests and the benchmark).
#[doc(hidden)]
pub fn client_hello_record(sni: Option<&str>) -> Vec<u8> {
    let mut exts = Vec::new();
    if let Some(name) = sni {
        let name = name.as_bytes();
        let mut list = vec![NAME_TYPE_HOST];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        exts.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
        exts.extend_from_slice(&(data.len() as u16).to_be_bytes());
        exts.extend_from_slice(&data);
    }
    // supported_versions: TLS 1.3, so the hello looks modern.
    exts.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0x42; 32]);
    body.push(0); // session id
    body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[0x01, 0x00]); // null compression
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hs = vec![HANDSHAKE_CLIENT_HELLO];
    hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend_from_slice(&body);
    let mut rec = vec![RECORD_HANDSHAKE, 0x03, 0x01];
    rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
    rec.extend_from_slice(&hs);
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_name() {
        let rec = client_hello_record(Some("allowed.test"));
        assert_eq!(parse(&rec), Hello::Complete(Some("allowed.test".into())));
        assert_eq!(parse(&client_hello_record(None)), Hello::Complete(None));
        // Every strict prefix is incomplete, never a panic or a wrong answer.
        for n in 0..rec.len() {
            assert_eq!(parse(&rec[..n]), Hello::Incomplete, "prefix {n}");
        }
        // Trailing application bytes after the hello do not matter.
        let mut more = rec.clone();
        more.extend_from_slice(b"junk");
        assert_eq!(parse(&more), Hello::Complete(Some("allowed.test".into())));
    }

    #[test]
    fn hello_split_over_records() {
        let rec = client_hello_record(Some("split.test"));
        let hs = &rec[5..];
        let mut split = Vec::new();
        for chunk in hs.chunks(7) {
            split.extend_from_slice(&[RECORD_HANDSHAKE, 3, 1]);
            split.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            split.extend_from_slice(chunk);
        }
        assert_eq!(parse(&split), Hello::Complete(Some("split.test".into())));
    }

    #[test]
    fn other_protocols_and_garbage() {
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(parse(b"SSH-2.0-x"), Hello::NotTls);
        assert_eq!(
            parse(&[22, 3, 1, 0, 0]),
            Hello::Malformed("bad record length")
        );
        assert_eq!(
            parse(&[22, 9, 1, 0, 1, 1]),
            Hello::Malformed("unknown record version")
        );
        assert_eq!(
            parse(&[22, 3, 1, 0, 4, 2, 0, 0, 0]),
            Hello::Malformed("first handshake message is not a ClientHello")
        );
        // A length that points past the body.
        let mut rec = client_hello_record(Some("a.test"));
        let n = rec.len();
        rec[n - 10] = 0xff;
        assert!(matches!(parse(&rec), Hello::Malformed(_)));
        // Fuzz-ish: flip every byte, never panic.
        let rec = client_hello_record(Some("fuzz.test"));
        for i in 0..rec.len() {
            for v in [0u8, 1, 0x7f, 0xff] {
                let mut m = rec.clone();
                m[i] = v;
                let _ = parse(&m);
            }
        }
    }

    #[test]
    fn duplicate_names_are_malformed() {
        // A server_name extension with `count` host names.
        let ext = |count: usize| {
            let name = b"x.test";
            let mut list = Vec::new();
            for _ in 0..count {
                list.push(NAME_TYPE_HOST);
                list.extend_from_slice(&(name.len() as u16).to_be_bytes());
                list.extend_from_slice(name);
            }
            let mut data = (list.len() as u16).to_be_bytes().to_vec();
            data.extend_from_slice(&list);
            let mut ext = EXT_SERVER_NAME.to_be_bytes().to_vec();
            ext.extend_from_slice(&(data.len() as u16).to_be_bytes());
            ext.extend_from_slice(&data);
            ext
        };
        let hello = |exts: &[Vec<u8>]| {
            let mut body = vec![3, 3];
            body.extend_from_slice(&[0; 32]);
            body.extend_from_slice(&[0, 0, 2, 0x13, 1, 1, 0]);
            let all: Vec<u8> = exts.concat();
            body.extend_from_slice(&(all.len() as u16).to_be_bytes());
            body.extend_from_slice(&all);
            body
        };
        assert_eq!(
            client_hello_sni(&hello(&[ext(1)])),
            Ok(Some("x.test".into()))
        );
        assert_eq!(
            client_hello_sni(&hello(&[ext(2)])),
            Err("several host names in server_name")
        );
        assert_eq!(
            client_hello_sni(&hello(&[ext(1), ext(1)])),
            Err("duplicate server_name extension")
        );
    }
}
