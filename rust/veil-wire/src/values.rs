//! PostgreSQL's binary value formats, to and from the text forms the engine uses.
//!
//! Clients choose text or binary per column and per parameter; the engine
//! speaks text only, so binary results are encoded from text here and binary
//! parameters decoded to text. Layouts follow PostgreSQL's `*send`/`*recv`
//! functions (big-endian; dates in days and timestamps in microseconds since
//! 2000-01-01; numeric in base-10000 digits).

use crate::engine::{Oid, WireError};

pub const BOOL: Oid = 16;
pub const BYTEA: Oid = 17;
pub const NAME: Oid = 19;
pub const INT8: Oid = 20;
pub const INT2: Oid = 21;
pub const INT4: Oid = 23;
pub const TEXT: Oid = 25;
pub const OID: Oid = 26;
pub const FLOAT4: Oid = 700;
pub const FLOAT8: Oid = 701;
pub const BPCHAR: Oid = 1042;
pub const VARCHAR: Oid = 1043;
pub const DATE: Oid = 1082;
pub const TIMESTAMP: Oid = 1114;
pub const NUMERIC: Oid = 1700;
pub const JSON: Oid = 114;
pub const TIMESTAMPTZ: Oid = 1184;
pub const INTERVAL: Oid = 1186;
pub const UUID: Oid = 2950;
pub const JSONB: Oid = 3802;
const JSONB_VERSION: u8 = 1;
pub const UNKNOWN: Oid = 705;

const POSTGRES_EPOCH_DAYS: i64 = 10_957; // 2000-01-01 counted from 1970-01-01

fn bad(oid: Oid, text: &str) -> WireError {
    WireError::new(
        "22P02",
        format!("invalid value {text:?} for a value of type OID {oid}"),
    )
}

fn unsupported(oid: Oid) -> WireError {
    WireError::new(
        "0A000",
        format!("binary format is not supported for type OID {oid}; ask for text format"),
    )
}

/// Append the binary form of a text value of type `oid` to `out`.
pub fn text_to_binary(oid: Oid, text: &[u8], out: &mut Vec<u8>) -> Result<(), WireError> {
    let s = std::str::from_utf8(text).map_err(|_| WireError::internal("a value is not UTF-8"))?;
    match oid {
        BOOL => out.push(matches!(s, "t" | "true" | "1") as u8),
        INT2 => out.extend(s.parse::<i16>().map_err(|_| bad(oid, s))?.to_be_bytes()),
        INT4 | OID => out.extend(s.parse::<i32>().map_err(|_| bad(oid, s))?.to_be_bytes()),
        INT8 => out.extend(s.parse::<i64>().map_err(|_| bad(oid, s))?.to_be_bytes()),
        FLOAT4 => out.extend((parse_float(s).ok_or_else(|| bad(oid, s))? as f32).to_be_bytes()),
        FLOAT8 => out.extend(parse_float(s).ok_or_else(|| bad(oid, s))?.to_be_bytes()),
        TEXT | VARCHAR | BPCHAR | NAME | UNKNOWN | BYTEA => out.extend_from_slice(text),
        DATE => out.extend((parse_date(s).ok_or_else(|| bad(oid, s))? as i32).to_be_bytes()),
        TIMESTAMP => out.extend(parse_timestamp(s).ok_or_else(|| bad(oid, s))?.to_be_bytes()),
        NUMERIC => numeric_to_binary(s, out).ok_or_else(|| bad(oid, s))?,
        JSON => out.extend_from_slice(text),
        JSONB => {
            out.push(JSONB_VERSION);
            out.extend_from_slice(text)
        }
        UUID => out.extend(parse_uuid(s).ok_or_else(|| bad(oid, s))?),
        TIMESTAMPTZ => out.extend(
            parse_timestamptz(s)
                .ok_or_else(|| bad(oid, s))?
                .to_be_bytes(),
        ),
        INTERVAL => {
            let (months, days, micros) = parse_interval(s).ok_or_else(|| bad(oid, s))?;
            out.extend(micros.to_be_bytes());
            out.extend(days.to_be_bytes());
            out.extend(months.to_be_bytes());
        }
        _ => match element_of(oid) {
            Some(element) => array_to_binary(element, s, out).ok_or_else(|| bad(oid, s))??,
            None => return Err(unsupported(oid)),
        },
    }
    Ok(())
}

/// The text form of a binary value of type `oid` (a bound parameter).
pub fn binary_to_text(oid: Oid, raw: &[u8]) -> Result<String, WireError> {
    let fixed = |n: usize| -> Result<&[u8], WireError> {
        if raw.len() == n {
            Ok(raw)
        } else {
            Err(WireError::new(
                "08P01",
                format!("a binary parameter of type OID {oid} must be {n} bytes"),
            ))
        }
    };
    Ok(match oid {
        BOOL => (if fixed(1)?[0] != 0 { "true" } else { "false" }).to_owned(),
        INT2 => i16::from_be_bytes(fixed(2)?.try_into().unwrap()).to_string(),
        INT4 | OID => i32::from_be_bytes(fixed(4)?.try_into().unwrap()).to_string(),
        INT8 => i64::from_be_bytes(fixed(8)?.try_into().unwrap()).to_string(),
        FLOAT4 => format_float(f32::from_be_bytes(fixed(4)?.try_into().unwrap()) as f64),
        FLOAT8 => format_float(f64::from_be_bytes(fixed(8)?.try_into().unwrap())),
        TEXT | VARCHAR | BPCHAR | NAME | UNKNOWN => String::from_utf8(raw.to_vec())
            .map_err(|_| WireError::new("22021", "a text parameter is not valid UTF-8"))?,
        BYTEA => hex_bytea(raw),
        DATE => format_date(i32::from_be_bytes(fixed(4)?.try_into().unwrap()) as i64),
        TIMESTAMP => format_timestamp(i64::from_be_bytes(fixed(8)?.try_into().unwrap())),
        NUMERIC => numeric_to_text(raw)
            .ok_or_else(|| WireError::new("08P01", "a binary numeric parameter is malformed"))?,
        JSON | JSONB => {
            let body = if oid == JSONB {
                match raw.split_first() {
                    Some((&JSONB_VERSION, rest)) => rest,
                    _ => return Err(WireError::new("08P01", "unsupported jsonb version")),
                }
            } else {
                raw
            };
            String::from_utf8(body.to_vec())
                .map_err(|_| WireError::new("22021", "a json parameter is not valid UTF-8"))?
        }
        UUID => format_uuid(fixed(16)?),
        TIMESTAMPTZ => format_timestamp(i64::from_be_bytes(fixed(8)?.try_into().unwrap())) + "+00",
        INTERVAL => {
            let raw = fixed(16)?;
            let micros = i64::from_be_bytes(raw[..8].try_into().unwrap());
            let days = i32::from_be_bytes(raw[8..12].try_into().unwrap());
            let months = i32::from_be_bytes(raw[12..].try_into().unwrap());
            format!("{months} months {days} days {micros} microseconds")
        }
        _ => match element_of(oid) {
            Some(element) => array_to_text(element, raw)?,
            None => return Err(unsupported(oid)),
        },
    })
}

/// The element type of an array type (`pg_type.typelem`), for the types Veil reports.
pub fn element_of(array: Oid) -> Option<Oid> {
    Some(match array {
        1000 => BOOL,
        1001 => BYTEA,
        1003 => NAME,
        1005 => INT2,
        1007 => INT4,
        1009 => TEXT,
        1014 => BPCHAR,
        1015 => VARCHAR,
        1016 => INT8,
        1021 => FLOAT4,
        1022 => FLOAT8,
        1028 => OID,
        1115 => TIMESTAMP,
        1182 => DATE,
        1185 => TIMESTAMPTZ,
        1187 => INTERVAL,
        1231 => NUMERIC,
        199 => JSON,
        2951 => UUID,
        3807 => JSONB,
        _ => return None,
    })
}

/// An array's text form, `{1,NULL,"a b"}` or `{{1,2},{3,4}}`: its dimensions and
/// its elements in order (`None` for NULL), as PostgreSQL's `array_in` reads it.
fn parse_array(s: &str) -> Option<(Vec<i32>, Vec<Option<String>>)> {
    let chars: Vec<char> = s.trim().chars().collect();
    let mut dims: Vec<i32> = Vec::new();
    let mut counts: Vec<i32> = Vec::new(); // elements seen at each open level
    let mut elements = Vec::new();
    let mut i = 0;
    let mut depth = 0usize;
    let mut done = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if done => return None,
            '{' => {
                depth += 1;
                if counts.len() < depth {
                    counts.push(0);
                }
                counts[depth - 1] = 0;
                i += 1;
            }
            '}' => {
                let n = counts[depth.checked_sub(1)?];
                if dims.len() < depth {
                    dims.resize(depth, -1);
                }
                match dims[depth - 1] {
                    -1 => dims[depth - 1] = n,
                    d if d != n => return None, // PostgreSQL's arrays are rectangular
                    _ => {}
                }
                depth -= 1;
                if depth == 0 {
                    done = true;
                } else {
                    counts[depth - 1] += 1;
                }
                i += 1;
            }
            ',' | ' ' | '\t' | '\n' | '\r' => i += 1,
            _ if depth == 0 => return None,
            '"' => {
                let mut value = String::new();
                i += 1;
                loop {
                    match chars.get(i)? {
                        '"' => break,
                        '\\' => {
                            i += 1;
                            value.push(*chars.get(i)?);
                        }
                        ch => value.push(*ch),
                    }
                    i += 1;
                }
                i += 1;
                elements.push(Some(value));
                counts[depth - 1] += 1;
            }
            _ => {
                let start = i;
                let mut value = String::new();
                while i < chars.len() && !matches!(chars[i], ',' | '}') {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    value.push(*chars.get(i)?);
                    i += 1;
                }
                let value = value.trim_end().to_owned();
                let unquoted: String = chars[start..i].iter().collect();
                let null = unquoted.trim().eq_ignore_ascii_case("NULL");
                elements.push(if null { None } else { Some(value) });
                counts[depth - 1] += 1;
            }
        }
    }
    if !done {
        return None;
    }
    if elements.is_empty() {
        dims.clear(); // '{}' is the empty array: no dimensions at all
    }
    Some((dims, elements))
}

/// PostgreSQL's binary array (`array_send`): ndim, has-nulls flag, element type,
/// each dimension's length and lower bound (1), then each element's length and bytes.
fn array_to_binary(element: Oid, s: &str, out: &mut Vec<u8>) -> Option<Result<(), WireError>> {
    let (dims, elements) = parse_array(s)?;
    out.extend((dims.len() as i32).to_be_bytes());
    out.extend((elements.iter().any(|e| e.is_none()) as i32).to_be_bytes());
    out.extend(element.to_be_bytes());
    for d in &dims {
        out.extend(d.to_be_bytes());
        out.extend(1i32.to_be_bytes());
    }
    let mut field = Vec::new();
    for value in elements {
        let Some(value) = value else {
            out.extend((-1i32).to_be_bytes());
            continue;
        };
        field.clear();
        if element == BYTEA {
            field.extend(unhex_bytea(&value)?);
        } else if let Err(err) = text_to_binary(element, value.as_bytes(), &mut field) {
            return Some(Err(err));
        }
        out.extend((field.len() as i32).to_be_bytes());
        out.extend_from_slice(&field);
    }
    Some(Ok(()))
}

/// The bytes of bytea's hex text form (`\x00ff`).
fn unhex_bytea(s: &str) -> Option<Vec<u8>> {
    let hex = s.strip_prefix("\\x")?.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    hex.chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect()
}

/// The text form of a binary array (a bound parameter), as `array_out` writes it.
fn array_to_text(element: Oid, raw: &[u8]) -> Result<String, WireError> {
    let mut at = 0usize;
    let word = |at: &mut usize| -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(take(raw, at, 4)?.try_into().unwrap()))
    };
    let ndim = word(&mut at)?;
    let _flags = word(&mut at)?;
    let given = word(&mut at)? as Oid;
    if given != element && given != 0 {
        return Err(WireError::new(
            "42804",
            format!("wrong element type: OID {given} where {element} was expected"),
        ));
    }
    if !(0..=6).contains(&ndim) {
        return Err(WireError::new(
            "08P01",
            "a binary array parameter is malformed",
        ));
    }
    let mut dims = Vec::new();
    for _ in 0..ndim {
        dims.push(word(&mut at)?.max(0) as usize);
        word(&mut at)?; // the lower bound: Veil's arrays start at 1
    }
    let total: usize = if dims.is_empty() {
        0
    } else {
        dims.iter().product()
    };
    let mut values = Vec::with_capacity(total);
    for _ in 0..total {
        let len = word(&mut at)?;
        if len < 0 {
            values.push("NULL".to_owned());
            continue;
        }
        let bytes = take(raw, &mut at, len as usize)?;
        values.push(quote_element(&binary_to_text(element, bytes)?));
    }
    Ok(nest(&dims, &mut values.into_iter()))
}

/// The next `n` bytes of `raw` from `at`, which moves past them.
fn take<'a>(raw: &'a [u8], at: &mut usize, n: usize) -> Result<&'a [u8], WireError> {
    let bytes = raw
        .get(*at..*at + n)
        .ok_or_else(|| WireError::new("08P01", "a binary array parameter is malformed"))?;
    *at += n;
    Ok(bytes)
}

/// An element as `array_out` quotes it: where empty, NULL-like, or holding a
/// delimiter, brace, quote, backslash or white space.
fn quote_element(value: &str) -> String {
    let needs = value.is_empty()
        || value.eq_ignore_ascii_case("NULL")
        || value
            .chars()
            .any(|c| matches!(c, '{' | '}' | ',' | '"' | '\\') || c.is_ascii_whitespace());
    if !needs {
        return value.to_owned();
    }
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

fn nest(dims: &[usize], values: &mut impl Iterator<Item = String>) -> String {
    let Some((&n, rest)) = dims.split_first() else {
        return "{}".to_owned();
    };
    let parts: Vec<String> = (0..n)
        .map(|_| {
            if rest.is_empty() {
                values.next().unwrap_or_default()
            } else {
                nest(rest, values)
            }
        })
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// PostgreSQL's text form of bytea: `\x` and two hex digits per byte.
pub fn hex_bytea(raw: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 + 2 * raw.len());
    s.push_str("\\x");
    for b in raw {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "Infinity" => Some(f64::INFINITY),
        "-Infinity" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse::<f64>().ok(),
    }
}

fn format_float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        (if v > 0.0 { "Infinity" } else { "-Infinity" }).to_owned()
    } else {
        format!("{v:?}")
    }
}

/// Days from 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Days since 2000-01-01 of `YYYY-MM-DD`.
fn parse_date(s: &str) -> Option<i64> {
    let mut parts = s.splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.get(..2)?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    Some(days_from_civil(y, m, d) - POSTGRES_EPOCH_DAYS)
}

fn format_date(days: i64) -> String {
    let (y, m, d) = civil_from_days(days + POSTGRES_EPOCH_DAYS);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Microseconds since 2000-01-01 00:00 of `YYYY-MM-DD[ HH:MM:SS[.ffffff]]`.
fn parse_timestamp(s: &str) -> Option<i64> {
    let (date, time) = s.split_once([' ', 'T']).unwrap_or((s, "00:00:00"));
    let days = parse_date(date)?;
    let mut hms = time.splitn(3, ':');
    let h: i64 = hms.next()?.parse().ok()?;
    let mi: i64 = hms.next()?.parse().ok()?;
    let sec = hms.next().unwrap_or("0");
    let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
    let whole: i64 = whole.parse().ok()?;
    let mut micros = 0i64;
    for (i, c) in frac.chars().take(6).enumerate() {
        micros += c.to_digit(10)? as i64 * 10i64.pow(5 - i as u32);
    }
    Some(((days * 24 + h) * 60 + mi) * 60_000_000 + whole * 1_000_000 + micros)
}

/// The 16 bytes of a UUID's 32 hex digits (hyphens and braces anywhere, as PostgreSQL takes).
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let digits: Vec<u8> = s
        .chars()
        .filter(|c| !matches!(c, '-' | '{' | '}'))
        .map(|c| c.to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        out[i] = pair[0] << 4 | pair[1];
    }
    Some(out)
}

fn format_uuid(raw: &[u8]) -> String {
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Microseconds since 2000-01-01 00:00 UTC of `YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]]`.
fn parse_timestamptz(s: &str) -> Option<i64> {
    let cut = s.rfind(['+', '-']).filter(|&i| i > 10)?;
    let (local, offset) = s.split_at(cut);
    let sign = if offset.starts_with('-') { -1 } else { 1 };
    let mut seconds = 0i64;
    for (i, part) in offset[1..].split(':').enumerate() {
        seconds += part.parse::<i64>().ok()? * [3600, 60, 1].get(i)?;
    }
    Some(parse_timestamp(local)? - sign * seconds * 1_000_000)
}

/// (months, days, microseconds) of PostgreSQL's interval text
/// (`1 year 2 mons -3 days 04:05:06.5`, `-00:00:01`, units spelled out in full or not).
fn parse_interval(s: &str) -> Option<(i32, i32, i64)> {
    let (mut months, mut days, mut micros) = (0i64, 0i64, 0i64);
    let mut words = s.split_whitespace();
    while let Some(word) = words.next() {
        if word.contains(':') {
            let negative = word.starts_with('-');
            let time = parse_timestamp(&format!(
                "2000-01-01 {}",
                word.trim_start_matches(['-', '+'])
            ))?;
            micros += if negative { -time } else { time };
            continue;
        }
        let n: i64 = word.parse().ok()?;
        let unit = words.next()?.to_ascii_lowercase();
        match unit.trim_end_matches('s') {
            "year" => months += 12 * n,
            "mon" | "month" => months += n,
            "day" => days += n,
            "hour" => micros += n * 3_600_000_000,
            "min" | "minute" => micros += n * 60_000_000,
            "sec" | "second" => micros += n * 1_000_000,
            "microsecond" => micros += n,
            _ => return None,
        }
    }
    Some((
        i32::try_from(months).ok()?,
        i32::try_from(days).ok()?,
        micros,
    ))
}

fn format_timestamp(micros: i64) -> String {
    let days = micros.div_euclid(86_400_000_000);
    let rest = micros.rem_euclid(86_400_000_000);
    let (h, rest) = (rest / 3_600_000_000, rest % 3_600_000_000);
    let (mi, rest) = (rest / 60_000_000, rest % 60_000_000);
    let (s, us) = (rest / 1_000_000, rest % 1_000_000);
    let base = format!("{} {h:02}:{mi:02}:{s:02}", format_date(days));
    if us == 0 {
        base
    } else {
        format!("{base}.{us:06}").trim_end_matches('0').to_owned()
    }
}

const NUMERIC_NEG: u16 = 0x4000;
const NUMERIC_NAN: u16 = 0xC000;

/// PostgreSQL's binary numeric: ndigits, weight, sign, dscale, base-10000 digits.
fn numeric_to_binary(s: &str, out: &mut Vec<u8>) -> Option<()> {
    if s == "NaN" {
        out.extend([0, 0, 0, 0]);
        out.extend(NUMERIC_NAN.to_be_bytes());
        out.extend([0, 0]);
        return Some(());
    }
    let (negative, unsigned) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int_part, frac_part) = unsplit(unsigned);
    if !int_part
        .chars()
        .chain(frac_part.chars())
        .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let int_part = int_part.trim_start_matches('0');
    // pad the integer part on the left and the fraction on the right to groups of 4
    let int_pad = (4 - int_part.len() % 4) % 4;
    let frac_pad = (4 - frac_part.len() % 4) % 4;
    let digits_text = format!(
        "{}{}{}{}",
        "0".repeat(int_pad),
        int_part,
        frac_part,
        "0".repeat(frac_pad)
    );
    let mut digits: Vec<i16> = digits_text
        .as_bytes()
        .chunks(4)
        .map(|c| std::str::from_utf8(c).unwrap().parse::<i16>().unwrap())
        .collect();
    let int_groups = (int_part.len() + int_pad) / 4;
    let mut weight = int_groups as i16 - 1;
    while digits.first() == Some(&0) {
        digits.remove(0);
        weight -= 1;
    }
    while digits.last() == Some(&0) {
        digits.pop();
    }
    if digits.is_empty() {
        weight = 0;
    }
    out.extend((digits.len() as i16).to_be_bytes());
    out.extend(weight.to_be_bytes());
    out.extend(
        (if negative && !digits.is_empty() {
            NUMERIC_NEG
        } else {
            0
        })
        .to_be_bytes(),
    );
    out.extend((frac_part.len() as u16).to_be_bytes());
    for d in digits {
        out.extend(d.to_be_bytes());
    }
    Some(())
}

fn unsplit(s: &str) -> (&str, &str) {
    s.split_once('.').unwrap_or((s, ""))
}

fn numeric_to_text(raw: &[u8]) -> Option<String> {
    let word =
        |i: usize| -> Option<i16> { Some(i16::from_be_bytes(raw.get(i..i + 2)?.try_into().ok()?)) };
    let ndigits = word(0)? as usize;
    let weight = word(2)? as i64;
    let sign = word(4)? as u16;
    let dscale = word(6)? as usize;
    if sign == NUMERIC_NAN {
        return Some("NaN".to_owned());
    }
    let digits: Vec<i64> = (0..ndigits)
        .map(|i| word(8 + 2 * i).map(|d| d as i64))
        .collect::<Option<_>>()?;
    let mut int_text = String::new();
    for g in 0..=weight.max(-1) {
        let d = digits.get(g as usize).copied().unwrap_or(0);
        if int_text.is_empty() {
            if d != 0 || g == weight {
                int_text = d.to_string();
            }
        } else {
            int_text.push_str(&format!("{d:04}"));
        }
    }
    if int_text.is_empty() {
        int_text.push('0');
    }
    let mut frac = String::new();
    let mut g = weight + 1;
    while frac.len() < dscale {
        let d = if g >= 0 {
            digits.get(g as usize).copied().unwrap_or(0)
        } else {
            0
        };
        frac.push_str(&format!("{d:04}"));
        g += 1;
    }
    frac.truncate(dscale);
    let sign = if sign == NUMERIC_NEG { "-" } else { "" };
    Some(if dscale > 0 {
        format!("{sign}{int_text}.{frac}")
    } else {
        format!("{sign}{int_text}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(oid: Oid, text: &str) -> String {
        let mut out = Vec::new();
        text_to_binary(oid, text.as_bytes(), &mut out).unwrap();
        binary_to_text(oid, &out).unwrap()
    }

    #[test]
    fn dates_and_timestamps_match_postgres() {
        let mut out = Vec::new();
        text_to_binary(DATE, b"2000-01-02", &mut out).unwrap();
        assert_eq!(out, 1i32.to_be_bytes());
        assert_eq!(round(DATE, "1992-02-29"), "1992-02-29");
        assert_eq!(round(DATE, "1969-12-31"), "1969-12-31");
        assert_eq!(
            round(TIMESTAMP, "1998-12-01 10:11:12.5"),
            "1998-12-01 10:11:12.5"
        );
        assert_eq!(
            round(TIMESTAMP, "1998-12-01 00:00:00"),
            "1998-12-01 00:00:00"
        );
    }

    #[test]
    fn numerics_round_trip() {
        for text in [
            "0",
            "1",
            "-1",
            "12345.67",
            "0.0001",
            "-0.50",
            "100000000",
            "10000.0000",
            "3.14159265358979",
        ] {
            assert_eq!(round(NUMERIC, text), text, "{text}");
        }
        // PostgreSQL's own bytes for 12345.67: 3 digits, weight 1, +, dscale 2: 1 2345 6700
        let mut out = Vec::new();
        text_to_binary(NUMERIC, b"12345.67", &mut out).unwrap();
        assert_eq!(out, [0, 3, 0, 1, 0, 0, 0, 2, 0, 1, 0x09, 0x29, 0x1a, 0x2c]);
    }

    #[test]
    fn arrays_round_trip() {
        for (oid, text) in [
            (1007, "{1,NULL,-3}"),
            (1007, "{}"),
            (1007, "{{1,2},{3,4}}"),
            (
                1009,
                r#"{"a,\"b",NULL,"","NULL","x y","back\\slash",plain}"#,
            ),
            (2951, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}"),
            (1001, r#"{"\\x00ff","\\x"}"#),
            (1185, r#"{"2024-01-02 01:04:05.123456+00"}"#),
            (1231, "{1.50,NULL,-2}"),
        ] {
            assert_eq!(round(oid, text), text, "{text}");
        }
        // PostgreSQL's own bytes for '{1,NULL}'::int4[]
        let mut out = Vec::new();
        text_to_binary(1007, b"{1,NULL}", &mut out).unwrap();
        let want: Vec<u8> = [1i32, 1, 23, 2, 1, 4, 1, -1]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        assert_eq!(out, want);
        assert!(text_to_binary(1007, b"{1,x}", &mut Vec::new()).is_err());
        assert!(text_to_binary(1007, b"{{1},{2,3}}", &mut Vec::new()).is_err());
    }

    #[test]
    fn integers_floats_and_bools() {
        assert_eq!(round(INT8, "-9223372036854775808"), "-9223372036854775808");
        assert_eq!(round(INT4, "42"), "42");
        assert_eq!(round(FLOAT8, "0.1"), "0.1");
        assert_eq!(round(FLOAT8, "-Infinity"), "-Infinity");
        assert_eq!(round(BOOL, "t"), "true");
        assert!(text_to_binary(INT4, b"x", &mut Vec::new()).is_err());
        assert_eq!(hex_bytea(&[0, 255]), "\\x00ff");
    }
}
