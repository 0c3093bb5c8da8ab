//! Request paths built from identifiers: each identifier is exactly one path segment.
//!
//! Every byte of a segment outside RFC 3986's unreserved set (`A-Z a-z 0-9 - . _ ~`) is
//! percent-encoded, `%` included, so a server that percent-decodes each segment once gets the
//! identifier back byte for byte, and no byte can act as a separator, a query, a fragment, a
//! parameter (`;`) or an escape on the way (case 009). The segments `.` and `..` cannot be sent
//! this way (a URL resolves them away); identifiers refuse them
//! ([`tenantry_kernel::IdError::DotSegment`]), and this module refuses them too rather than
//! send a request to another resource.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::Url;

/// The bytes that are percent-encoded in a segment: all but RFC 3986 unreserved characters.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `base` with `segments` appended to its path (after any prefix the base URL has), each
/// percent-encoded as one segment; the base's query and fragment are dropped.
///
/// # Errors
/// A message naming the segment when one is empty, `.` or `..` (it cannot be sent as one
/// segment), or when the base URL cannot take a path.
pub(crate) fn with_segments<S: AsRef<str>>(base: &Url, segments: &[S]) -> Result<Url, String> {
    if base.cannot_be_a_base() {
        return Err(format!("base URL {base} cannot take a path"));
    }
    let mut path = base.path().trim_end_matches('/').to_owned();
    for segment in segments {
        let segment = segment.as_ref();
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(format!(
                "{segment:?} cannot be sent as one URL path segment (a URL resolves it away)"
            ));
        }
        path.push('/');
        path.extend(utf8_percent_encode(segment, SEGMENT));
    }
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.set_path(&path);
    Ok(url)
}

/// Percent-decodes one segment (test helper: what a server that decodes once receives).
#[cfg(test)]
pub(crate) fn decode_segment(segment: &str) -> Vec<u8> {
    percent_encoding::percent_decode_str(segment).collect()
}

/// Test support shared by the clients' tests: a recording HTTP server and the id shapes.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    /// A server that answers every request with `raw` (after reading its headers and body)
    /// and closes the connection; returns its URL and the raw request target (path and
    /// query, exactly as sent) of every request.
    pub(crate) async fn recording(raw: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let targets = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen_targets = Arc::clone(&targets);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let head = String::from_utf8_lossy(&seen).into_owned();
                if let Some(target) = head.lines().next().and_then(|l| l.split(' ').nth(1)) {
                    seen_targets.lock().unwrap().push(target.to_owned());
                }
                socket.write_all(raw.as_bytes()).await.ok();
                socket.shutdown().await.ok();
            }
        });
        (url, targets)
    }

    /// Every id shape intake accepts, as far as bytes go: each printable ASCII character
    /// alone, doubled and between letters, dots mixed with other characters, escapes that
    /// must not be decoded, non-ASCII text and the longest id.
    pub(crate) fn accepted_id_shapes() -> Vec<String> {
        let mut shapes = Vec::new();
        for c in (0x21u8..=0x7e).map(char::from) {
            shapes.push(c.to_string());
            shapes.push(format!("{c}{c}"));
            shapes.push(format!("a{c}b"));
        }
        for extra in [
            "...",
            ".a",
            "a.",
            "%2e",
            "%2E%2E",
            "%2f",
            "%00",
            "a%20b",
            "caf\u{e9}",
            "\u{65e5}\u{672c}",
            "\u{1F980}",
            "x;y=z",
            "?x=1",
            "#top",
        ] {
            shapes.push(extra.to_owned());
        }
        shapes.push("x".repeat(tenantry_kernel::id::MAX_ID_LEN));
        shapes.retain(|id| tenantry_kernel::TenantId::parse(id.as_str()).is_ok());
        shapes
    }

    /// The id segments of `target` (a request target as the server received it) when its
    /// path has exactly the shape `pattern` (`*` stands for an id segment); each is checked to
    /// hold only unreserved characters and `%XX` escapes, and is returned decoded.
    pub(crate) fn id_segments(target: &str, pattern: &[&str]) -> Vec<Vec<u8>> {
        let path = target.split('?').next().unwrap();
        let sent: Vec<&str> = path.split('/').skip(1).collect();
        assert_eq!(sent.len(), pattern.len(), "{target}");
        let mut ids = Vec::new();
        for (segment, expected) in sent.iter().zip(pattern) {
            if *expected == "*" {
                assert!(
                    segment.bytes().all(|b| b.is_ascii_alphanumeric()
                        || matches!(b, b'-' | b'.' | b'_' | b'~' | b'%')),
                    "{target}"
                );
                ids.push(super::decode_segment(segment));
            } else {
                assert_eq!(segment, expected, "{target}");
            }
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_009_segments_are_percent_encoded_one_by_one() {
        let base = Url::parse("http://h:1/kfs/").unwrap();
        let table: &[(&[&str], &str)] = &[
            (&["v1", "a"], "/kfs/v1/a"),
            (&["a%2eb"], "/kfs/a%252eb"),
            (&["%2e"], "/kfs/%252e"),
            (&["..."], "/kfs/..."),
            (&[".a", "a."], "/kfs/.a/a."),
            (&["a;b=c"], "/kfs/a%3Bb%3Dc"),
            (&["a?b#c"], "/kfs/a%3Fb%23c"),
            (&["a\\b"], "/kfs/a%5Cb"),
            (&["a+b", "a:b", "a@b"], "/kfs/a%2Bb/a%3Ab/a%40b"),
            (&["[x]|^`{}"], "/kfs/%5Bx%5D%7C%5E%60%7B%7D"),
            (&["caf\u{e9}"], "/kfs/caf%C3%A9"),
            (&["a~b_c-d"], "/kfs/a~b_c-d"),
        ];
        for (segments, path) in table {
            let url = with_segments(&base, segments).unwrap();
            assert_eq!(url.path(), *path, "{segments:?}");
            for (sent, original) in url.path().split('/').skip(2).zip(segments.iter()) {
                assert_eq!(decode_segment(sent), original.as_bytes());
            }
        }
        for bad in [".", "..", ""] {
            let error = with_segments(&base, &["v1", bad]).unwrap_err();
            assert!(error.contains("cannot be sent"), "{error}");
        }
        let bare = Url::parse("http://h:1").unwrap();
        assert_eq!(
            with_segments(&bare, &["v1"]).unwrap().as_str(),
            "http://h:1/v1"
        );
    }
}
