//! Bounding text that Tenantry did not write (a remote's error message, a stored row of an
//! older version) before it is stored, shown in the console or printed by the CLI.
//!
//! What a remote says is data of bounded size, never a control sequence (case 010): a
//! KnowledgeFS that answers with a 700 KB message holding `ESC [2J` must not grow every stored
//! attempt by 700 KB, widen the console's pages or clear an operator's terminal. The rule is
//! [`bounded`]; [`MAX_MESSAGE_BYTES`] is the bound of stored and shown error messages.

use std::borrow::Cow;

/// Longest error message Tenantry stores on a command (its last error and each entry of its
/// attempt-error log) and shows, in bytes of UTF-8: 2,048 (docs/operations.md, "Bounds").
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// Longest error code a remote may send and have kept as its code, in bytes: 64 (codes are
/// upper-case ASCII identifiers; see `tenantry_lifecycle::code::is_identifier_code`). Also the
/// bound of a code quoted in a message.
pub const MAX_CODE_BYTES: usize = 64;

/// What ends a text that [`bounded`] cut short (3 bytes, counted within the bound).
pub const TRUNCATION_MARK: &str = "\u{2026}";

/// `text` made safe to store and show, at most `max_bytes` bytes long:
///
/// - whitespace control characters (tab, line feed, carriage return, vertical tab, form feed,
///   next line) and the Unicode line and paragraph separators become one space each;
/// - every other control character (C0, DEL, C1: `ESC` and therefore every terminal escape
///   sequence loses its introducer) and the invisible format characters that reorder or hide
///   text (bidirectional controls, zero-width characters, BOM; the list of
///   [`crate::id::is_invisible_format`]) are removed;
/// - a result longer than `max_bytes` is cut at a character boundary and ends with
///   [`TRUNCATION_MARK`] (the mark counts toward `max_bytes`; with `max_bytes < 3` the text is
///   only cut).
///
/// Borrows `text` when it is already clean and short enough. Pure and total: never fails.
pub fn bounded(text: &str, max_bytes: usize) -> Cow<'_, str> {
    let clean = text.len() <= max_bytes && !text.chars().any(|c| replacement(c) != Some(c));
    if clean {
        return Cow::Borrowed(text);
    }
    let marked = max_bytes >= TRUNCATION_MARK.len();
    // Room for text when a mark must follow it.
    let room = if marked {
        max_bytes - TRUNCATION_MARK.len()
    } else {
        max_bytes
    };
    let mut out = String::with_capacity(text.len().min(max_bytes));
    // `out.len()` when the next character no longer fitted in `room` (a character boundary).
    let mut cut_at = None;
    for c in text.chars().filter_map(replacement) {
        let next = out.len() + c.len_utf8();
        if cut_at.is_none() && next > room {
            cut_at = Some(out.len());
        }
        if next > max_bytes {
            out.truncate(cut_at.unwrap_or(out.len()));
            if marked {
                out.push_str(TRUNCATION_MARK);
            }
            return Cow::Owned(out);
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// `text` with every control character and invisible format character (the characters
/// [`bounded`] removes) but line feed and tab written as a visible JSON-style escape `\uXXXX`
/// (`ESC` becomes the six characters `\u001b`, a carriage return `\u000d`), for a terminal:
/// the CLI passes everything it prints through it, so no stored text (an old row written
/// before the bounds, an operator's reason) can move the cursor, overwrite a line, clear the
/// screen or set the window title. Line feeds and tabs only lay text out, and multi-line
/// output (pretty JSON) needs them.
///
/// JSON stays valid JSON with the same value: an encoder writes such characters only inside
/// strings, where `\uXXXX` is their escape. Borrows `text` when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let is_unsafe =
        |c: char| (c.is_control() && c != '\n' && c != '\t') || crate::id::is_invisible_format(c);
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe(c) {
            // Every such character is in the Basic Multilingual Plane.
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// What `c` becomes in a [`bounded`] text: itself, a space, or nothing.
fn replacement(c: char) -> Option<char> {
    match c {
        '\t' | '\n' | '\r' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' | '\u{2029}' => Some(' '),
        c if c.is_control() || crate::id::is_invisible_format(c) => None,
        c => Some(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_010_text_is_stripped_of_controls_and_bounded() {
        let table: &[(&str, usize, &str)] = &[
            ("plain", 10, "plain"),
            ("", 10, ""),
            ("\u{1b}[2Jcleared", 64, "[2Jcleared"),
            ("a\u{1b}]0;title\u{7}b", 64, "a]0;titleb"),
            ("line\nnext\r\ttab", 64, "line next  tab"),
            ("del\u{7f}c1\u{9b}31m", 64, "delc131m"),
            ("bidi\u{202e}txt\u{200b}", 64, "biditxt"),
            ("sep\u{2028}x", 64, "sep x"),
            ("abcdefghij", 10, "abcdefghij"),
            ("abcdefghijk", 10, "abcdefg\u{2026}"),
            // A cut never splits a character: `é` is two bytes.
            (
                "\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}",
                10,
                "\u{e9}\u{e9}\u{e9}\u{2026}",
            ),
            // Removed characters do not count toward the bound.
            ("\u{1b}\u{1b}\u{1b}abcdefghij", 10, "abcdefghij"),
            ("abcdef", 2, "ab"),
        ];
        for (input, max, expected) in table {
            let out = bounded(input, *max);
            assert_eq!(out, *expected, "{input:?} within {max}");
            assert!(out.len() <= *max, "{input:?}");
        }
        assert!(matches!(bounded("clean", 10), Cow::Borrowed(_)));
        let huge = format!("\u{1b}[2J{}", "x".repeat(700 * 1024));
        let out = bounded(&huge, MAX_MESSAGE_BYTES);
        assert!(out.len() <= MAX_MESSAGE_BYTES && out.ends_with(TRUNCATION_MARK));
        assert!(!out.contains('\u{1b}'));
    }

    #[test]
    fn case_010_controls_are_escaped_for_a_terminal() {
        let table: &[(&str, &str)] = &[
            ("plain text", "plain text"),
            ("\u{1b}[2J", "\\u001b[2J"),
            ("a\tb\nc", "a\tb\nc"),
            ("over\rwrite", "over\\u000dwrite"),
            ("\u{9b}31m", "\\u009b31m"),
            ("\u{7f}", "\\u007f"),
            ("rtl\u{202e}x", "rtl\\u202ex"),
            ("caf\u{e9} \u{1F980}", "caf\u{e9} \u{1F980}"),
        ];
        for (input, expected) in table {
            assert_eq!(escape_controls(input), *expected, "{input:?}");
        }
        // A JSON line keeps its value.
        let json = "{\"m\":\"\u{9b}2J\u{7f}\"}";
        let escaped = escape_controls(json);
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back["m"], "\u{9b}2J\u{7f}");
    }
}
