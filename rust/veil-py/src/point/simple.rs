//! A simple-protocol statement's integers as parameters (`pgbench -M simple`).
//!
//! `UPDATE pgbench_accounts SET abalance = abalance + -2750 WHERE aid = 78201` comes
//! with its values written in. The session reads such a text's integer literals off
//! its tokens (`veil.sql.literals.normalized`, `veil.serve.shapes`) and keeps the plan
//! of its shape: the text with a `?` in each value's place. Here every integer token
//! of the text becomes a `?`, with its digits as the parameter; the result can only
//! meet a kept plan whose shape is that very text (the session's scan takes the
//! integers of the same places, by the same tokens around them, or its shape is
//! another text and nothing is found). The tokens are the session scan's, for the
//! texts it reads; anything it does not follow (quotes glued to a value, markers,
//! dollar quoting, a number with a point or exponent glued to more) gives None.

/// The statement's shape and its integers' digits; None if this scan does not take it.
pub fn integers(sql: &str) -> Option<(String, Vec<&str>)> {
    let text = statement(sql)?;
    let bytes = text.as_bytes();
    let mut shape = String::with_capacity(text.len());
    let mut values = Vec::new();
    let (mut at, mut start) = (0, 0);
    while at < bytes.len() {
        let b = bytes[at];
        let next = bytes.get(at + 1).copied();
        if b.is_ascii_whitespace() {
            at += 1;
        } else if b == b'-' && next == Some(b'-') {
            at = text[at..].find('\n').map_or(bytes.len(), |n| at + n);
        } else if b == b'/' && next == Some(b'*') {
            at += 2 + text[at + 2..].find("*/")? + 2;
        } else if b == b'\'' || b == b'"' {
            at = quoted(bytes, at)?;
        } else if b.is_ascii_alphabetic() || b == b'_' {
            at += 1;
            while at < bytes.len()
                && (bytes[at].is_ascii_alphanumeric() || bytes[at] == b'_' || bytes[at] == b'$')
            {
                at += 1;
            }
        } else if b.is_ascii_digit() || (b == b'.' && next.is_some_and(|n| n.is_ascii_digit())) {
            let end = number_end(bytes, at)?;
            let token = &text[at..end];
            if token.bytes().all(|d| d.is_ascii_digit()) {
                if at > 0 && matches!(bytes[at - 1], b'\'' | b'"') {
                    return None; // glued to a quote
                }
                shape.push_str(&text[start..at]);
                shape.push('?');
                values.push(token);
                start = end;
            }
            at = end;
        } else if matches!(b, b'?' | b'$') || !b.is_ascii() {
            return None; // markers or dollar quoting of its own; text this scan does not read
        } else {
            at += 1;
        }
    }
    if values.is_empty() || values.len() > 64 {
        return None;
    }
    shape.push_str(&text[start..]);
    Some((shape, values))
}

/// The one statement of `sql` as the session cuts it (`veil.serve.dialect.split`).
fn statement(sql: &str) -> Option<&str> {
    let trimmed = sql.trim_end();
    let head = trimmed.strip_suffix(';').unwrap_or(trimmed);
    if head.contains(';') {
        return None;
    }
    let head = head.trim();
    (!head.is_empty()).then_some(head)
}

/// The end of the quoted string or identifier starting at `at` (a doubled quote inside).
fn quoted(bytes: &[u8], at: usize) -> Option<usize> {
    let quote = bytes[at];
    let mut i = at + 1;
    loop {
        if *bytes.get(i)? == quote {
            if bytes.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
}

/// The end of the number token at `at` (`\d+\.\d*|\.\d+|\d+`, an exponent), which must
/// not run into a word character or a point; None if it does (the scan's `other`).
fn number_end(bytes: &[u8], at: usize) -> Option<usize> {
    let digits = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    let mut end = digits(at);
    if bytes.get(end) == Some(&b'.') {
        end = digits(end + 1);
    }
    if matches!(bytes.get(end), Some(b'e' | b'E')) {
        let mut e = end + 1;
        if matches!(bytes.get(e), Some(b'+' | b'-')) {
            e += 1;
        }
        if bytes.get(e).is_some_and(u8::is_ascii_digit) {
            end = digits(e);
        }
    }
    match bytes.get(end) {
        Some(b) if b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.' => None,
        _ => Some(end),
    }
}

#[cfg(test)]
mod tests {
    use super::integers;

    #[test]
    fn pgbench_statements() {
        let (shape, values) =
            integers("UPDATE pgbench_accounts SET abalance = abalance + -2750 WHERE aid = 78201;")
                .unwrap();
        assert_eq!(
            shape,
            "UPDATE pgbench_accounts SET abalance = abalance + -? WHERE aid = ?"
        );
        assert_eq!(values, ["2750", "78201"]);
        let (shape, values) = integers(
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES (3, 1, 31, -9, CURRENT_TIMESTAMP);",
        )
        .unwrap();
        assert!(shape.ends_with("VALUES (?, ?, ?, -?, CURRENT_TIMESTAMP)"));
        assert_eq!(values, ["3", "1", "31", "9"]);
    }

    #[test]
    fn what_it_leaves() {
        assert!(integers("SELECT a FROM t WHERE k = $1").is_none());
        assert!(integers("SELECT a FROM t WHERE k = ?").is_none());
        assert!(integers("SELECT a FROM t WHERE k = 1.5e3x").is_none());
        assert!(integers("SELECT 1; SELECT 2").is_none());
        assert!(integers("SELECT a FROM t").is_none());
        let (shape, values) = integers("SELECT 'a1' FROM \"t 2\" WHERE k = 12 -- 5\n").unwrap();
        assert_eq!(shape, "SELECT 'a1' FROM \"t 2\" WHERE k = ? -- 5");
        assert_eq!(values, ["12"]);
        let (shape, _) = integers("SELECT c1, 2.5 FROM t WHERE k = 3").unwrap();
        assert_eq!(shape, "SELECT c1, 2.5 FROM t WHERE k = ?");
    }
}
